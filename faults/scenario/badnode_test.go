package scenario_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/faults/harness"
	"github.com/redlock-go/redlock/faults/scenario"
)

// badNodeRun runs 4 separate clients of 16 workers each for 2 s over urls, with
// 300 ms Lock deadlines and a 200 ms node timeout, and checks what issue 12
// promises whatever a minority of nodes does: no call later than its deadline
// plus the node timeout, Close within 1.5 s, goroutines back to their baseline
// (+20) after Close.
func badNodeRun(t *testing.T, name string, urls []string, measure func() string) scenario.BadNodeResult {
	t.Helper()
	res := scenario.RunBadNode(t, scenario.BadNodeConfig{
		Name: name, URLs: urls, Clients: 4, Workers: 16,
		Duration: 2 * time.Second, Deadline: 300 * time.Millisecond, NodeTimeout: 200 * time.Millisecond,
		Measure: measure,
	})
	assert.Positive(t, res.Acquisitions, "a healthy majority grants locks")
	assert.Zero(t, res.LateCalls, "calls later than deadline + node timeout (slowest %v)", res.Slowest)
	assert.LessOrEqual(t, res.Close, 1500*time.Millisecond, "Close")
	assert.LessOrEqual(t, res.GoroutinesAfter, res.GoroutinesBaseline+20, "goroutines after Close")
	return res
}

// withBad returns the healthy nodes' URLs with bad inserted in the middle.
func withBad(c *harness.Cluster, bad string) []string {
	urls := c.URLs()
	return append([]string{urls[0], bad}, urls[1:]...)
}

// TestFaultHungConnect: one node of three never completes a TCP connect
// (full backlog: SYNs dropped).
func TestFaultHungConnect(t *testing.T) {
	c := harness.Start(t, 2, harness.WithReuse())
	badNodeRun(t, "hung-connect", withBad(c, harness.HungConnect(t).URL()), nil)
}

// TestFaultTLSStall: one node of three accepts TCP but never answers the TLS
// handshake.
func TestFaultTLSStall(t *testing.T) {
	c := harness.Start(t, 2, harness.WithReuse())
	badNodeRun(t, "tls-stall", withBad(c, "rediss://"+harness.Stall(t).Addr()), nil)
}

// TestFaultGarbageReply: one node of three answers every command with a reply
// whose length does not fit in memory, or no number at all. The process must
// survive.
func TestFaultGarbageReply(t *testing.T) {
	c := harness.Start(t, 2, harness.WithReuse())
	bad := harness.Garbage(t, "$9223372036854775807\r\n", "$99999999999999999999\r\n", "*3000000000\r\n", "+OK\r\n", "$-7\r\n", ":x\r\n")
	badNodeRun(t, "garbage-reply", withBad(c, bad.URL()), nil)
}

// TestFaultACLDeniedSubscribe: every node refuses SUBSCRIBE to the clients'
// user. Waiters fall back to polling; the clients must not reconnect in a loop.
func TestFaultACLDeniedSubscribe(t *testing.T) {
	c := harness.Start(t, 3, harness.WithReuse())
	var urls []string
	received := func() (total int) {
		for _, n := range c.Nodes() {
			info, err := redis.String(redisDoT(t, n.Addr(), "INFO", "stats"))
			require.NoError(t, err)
			var v int
			for _, line := range strings.Split(info, "\r\n") {
				if _, err := fmt.Sscanf(line, "total_connections_received:%d", &v); err == nil {
					total += v
				}
			}
		}
		return total
	}
	for _, n := range c.Nodes() {
		_, err := redisDoT(t, n.Addr(), "ACL", "SETUSER", "locker", "on", ">secret", "~*", "&*", "+@all", "-subscribe", "-psubscribe", "-ssubscribe")
		require.NoError(t, err)
		urls = append(urls, "redis://locker:secret@"+n.Addr())
	}
	before := received()
	var conns int
	badNodeRun(t, "acl-denied-subscribe", urls, func() string {
		conns = received() - before - len(urls)
		return fmt.Sprintf("connections=%d", conns)
	})
	// Each client keeps a few pipelined connections per node and retries its
	// subscription with a backoff (50 ms doubling to 10 s); before, every
	// waiter redialled at once, over 1 600 connections in this run.
	assert.Less(t, conns, 150, "connections opened to nodes that refuse SUBSCRIBE")
}

// redisDoT runs one command on a fresh connection.
func redisDoT(t *testing.T, addr, cmd string, args ...any) (any, error) {
	t.Helper()
	conn, err := redis.Dial("tcp", addr, redis.DialConnectTimeout(2*time.Second), redis.DialReadTimeout(2*time.Second))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.Do(cmd, args...)
}

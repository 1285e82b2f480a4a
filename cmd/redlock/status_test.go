package main

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/redistest"
)

// rowOf returns the table row of node name.
func rowOf(t *testing.T, out, name string) []string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == name {
			return f
		}
	}
	t.Fatalf("no row for %s in:\n%s", name, out)
	return nil
}

func nodeName(s *redistest.Server) string { return s.Addr() + "/0" }

func TestStatus(t *testing.T) {
	servers := redistest.StartN(t, 3)
	nodes := nodesFlag(servers)

	r := runCLI("status", "--nodes", nodes, "job")
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	assert.Contains(t, r.stdout, `lock "job" (key redlock:{job}) on 3 nodes, majority 2`)
	assert.Contains(t, r.stdout, "held on 0 of 3 nodes (majority 2): free")
	assert.Contains(t, r.stdout, "fencing counter: none")
	assert.Equal(t, []string{nodeName(servers[0]), "ok", "no", "-", "-", "-"}, rowOf(t, r.stdout, nodeName(servers[0])))
	assert.NotContains(t, r.stdout, "even count")

	c, err := redlock.Dial(redistest.URLs(servers))
	require.NoError(t, err)
	defer c.Close()
	ctx := context.Background()
	l, err := c.Lock(ctx, "job", redlock.WithFence())
	require.NoError(t, err)
	tok, err := l.Fence(ctx)
	require.NoError(t, err)

	// Lock and Fence return once a majority answered: the third node's SET
	// and counter write-back may land just after.
	require.Eventually(t, func() bool {
		r = runCLI("status", "job", "--nodes", nodes) // flags after NAME too
		return r.code == 0 && strings.Contains(r.stdout, "held on 3 of 3 nodes") &&
			strings.Count(r.stdout, " "+strconv.FormatUint(tok, 10)+"\n") == 3
	}, 5*time.Second, 10*time.Millisecond, "every node holds the lock and the counter:\n%s", r.stdout)
	digest := redlock.Digest(l.Token())
	assert.Contains(t, r.stdout, "held on 3 of 3 nodes (majority 2) by holder "+digest)
	assert.Contains(t, r.stdout, "fencing counter: "+strconv.FormatUint(tok, 10))
	assert.NotContains(t, r.stdout, l.Token(), "never the token itself")
	for _, s := range servers {
		row := rowOf(t, r.stdout, nodeName(s))
		require.Len(t, row, 6, "%v", row)
		assert.Equal(t, "ok", row[1])
		assert.Equal(t, "yes", row[2])
		ttl, err := time.ParseDuration(row[3])
		require.NoError(t, err, "%v", row)
		assert.True(t, ttl > 0 && ttl <= redlock.DefaultTTL, "%v", row)
		assert.Equal(t, digest, row[4])
		assert.Equal(t, strconv.FormatUint(tok, 10), row[5])
	}

	// Held on a minority only: not held by anyone.
	_, err = servers[0].Do("DEL", "redlock:{job}")
	require.NoError(t, err)
	_, err = servers[1].Do("DEL", "redlock:{job}")
	require.NoError(t, err)
	r = runCLI("status", "--nodes", nodes, "job")
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	assert.Contains(t, r.stdout, "held on 1 of 3 nodes (majority 2): no holder has a majority")

	require.Error(t, l.Release(ctx)) // a majority no longer had it
	r = runCLI("status", "--nodes", nodes, "--key-prefix", "other:", "job")
	require.Equal(t, 0, r.code)
	assert.Contains(t, r.stdout, "key other:{job}")
	assert.Contains(t, r.stdout, "free")
}

func TestStatusUnreachable(t *testing.T) {
	servers := redistest.StartN(t, 2)
	down := freeURL(t)
	downName := strings.TrimPrefix(down, "redis://") + "/0"

	r := runCLI("status", "--nodes", nodesFlag(servers)+","+down, "job")
	assert.Equal(t, 0, r.code, "a majority answered; stderr: %s", r.stderr)
	assert.Regexp(t, regexp.MustCompile(regexp.QuoteMeta(downName)+`\s+failing:refused\s+error: dial tcp .*connection refused`), r.stdout)
	assert.Contains(t, r.stdout, "held on 0 of 3 nodes (majority 2): free")

	r = runCLI("status", "--nodes", servers[0].URL()+","+down+","+freeURL(t), "job")
	assert.Equal(t, 1, r.code, "a minority answered")
	assert.Contains(t, r.stdout, "only 1 of 3 nodes answered (majority 2): cannot tell whether the lock is held")

	// A paused node does not answer: the timeout bounds the wait.
	servers[1].Pause()
	r = runCLI("status", "--nodes", nodesFlag(servers), "--timeout", "300ms", "job")
	assert.Equal(t, 1, r.code)
	assert.Regexp(t, regexp.MustCompile(regexp.QuoteMeta(nodeName(servers[1]))+`\s+failing:timeout\s+error: no answer within 300ms`), r.stdout)
	assert.Less(t, r.elapsed, 10*time.Second)
	assert.NotContains(t, r.stderr, "goroutine")
}

// status shows every node's health state as the library names it: a wrong
// password is failing:auth, one instance listed twice failing:same-instance,
// a node up less than --restart-quarantine quarantined, with the time left.
// An even node count is noted.
func TestStatusHealth(t *testing.T) {
	servers := []*redistest.Server{redistest.Start(t, "--requirepass", "right"), redistest.Start(t), redistest.Start(t)}
	alias := strings.Replace(servers[1].Addr(), "127.0.0.1", "localhost", 1)
	const password = "wr0ng-s3cret"
	nodes := "redis://:" + password + "@" + servers[0].Addr() + "," + servers[1].URL() + "," + servers[2].URL() + ",redis://" + alias

	r := runCLI("status", "--nodes", nodes, "job")
	assert.Equal(t, 1, r.code, "two of four answered: no majority\n%s", r.stdout)
	assert.Equal(t, "failing:auth", rowOf(t, r.stdout, nodeName(servers[0]))[1], r.stdout)
	assert.Equal(t, "ok", rowOf(t, r.stdout, nodeName(servers[1]))[1], r.stdout)
	assert.Equal(t, "failing:same-instance", rowOf(t, r.stdout, alias+"/0")[1], r.stdout)
	assert.Contains(t, r.stdout, "note: 4 nodes, an even count, tolerate 1 failed nodes, as 3 would")
	assert.NotContains(t, r.stdout+r.stderr, password)

	// Fresh servers: quarantined by a quarantine of a minute.
	r = runCLI("status", "--nodes", nodesFlag(servers[1:]), "--restart-quarantine", "1m", "job")
	assert.Equal(t, 0, r.code, r.stderr)
	for _, s := range servers[1:] {
		state := rowOf(t, r.stdout, nodeName(s))[1]
		left, ok := strings.CutPrefix(state, "quarantined:")
		require.True(t, ok, r.stdout)
		d, err := time.ParseDuration(left)
		require.NoError(t, err)
		assert.True(t, d > 0 && d <= time.Minute, state)
	}
	r = runCLI("status", "--nodes", nodesFlag(servers[1:]), "--restart-quarantine", "-1s", "job")
	assert.Equal(t, exitConfig, r.code)
	r = runCLI("status", "--nodes", nodesFlag(servers[1:]), "--restart-quarantine", "48h", "job")
	assert.Equal(t, exitConfig, r.code)
	assert.Contains(t, r.stderr, "restart quarantine")
}

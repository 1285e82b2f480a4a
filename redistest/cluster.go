package redistest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Cluster is a Redis Cluster of masters only, started by a test.
type Cluster struct {
	// Masters are the servers, in slot order: Masters[i] serves the i-th of equal
	// slot ranges.
	Masters []*Server
}

// Addrs returns the masters' host:port addresses.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Masters))
	for i, s := range c.Masters {
		out[i] = s.Addr()
	}
	return out
}

// StartCluster starts n (1 to 16) cluster-enabled redis-servers, splits the
// 16384 slots between them in equal ranges (CLUSTER ADDSLOTSRANGE, Redis 7),
// joins them (CLUSTER MEET) and waits, at most 30s, until every one reports
// cluster_state:ok and knows all n masters. The servers are killed when the test
// ends.
func StartCluster(tb testing.TB, n int) *Cluster {
	tb.Helper()
	if n < 1 || n > 16 {
		tb.Fatalf("redistest: cluster of %d masters", n)
	}
	c := &Cluster{}
	for range n {
		bus, err := freePort()
		if err != nil {
			tb.Fatal(err)
		}
		// The bus port defaults to port+10000, above 65535 for most free ports.
		c.Masters = append(c.Masters, Start(tb, "--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000",
			"--cluster-port", strconv.Itoa(bus)))
	}
	for i, s := range c.Masters {
		lo, hi := i*16384/n, (i+1)*16384/n-1
		if _, err := s.Do("CLUSTER", "ADDSLOTSRANGE", lo, hi); err != nil {
			tb.Fatalf("redistest: CLUSTER ADDSLOTSRANGE on %s: %v", s.Addr(), err)
		}
		if i > 0 {
			host, port := splitAddr(tb, s.Addr())
			busPort := clusterPort(tb, s)
			if _, err := c.Masters[0].Do("CLUSTER", "MEET", host, port, busPort); err != nil {
				tb.Fatalf("redistest: CLUSTER MEET %s: %v", s.Addr(), err)
			}
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range c.Masters {
		for {
			if msg := clusterReady(s, n); msg == "" {
				break
			} else if time.Now().After(deadline) {
				tb.Fatalf("redistest: cluster not ready within 30s: %s: %s", s.Addr(), msg)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

func splitAddr(tb testing.TB, addr string) (string, int) {
	tb.Helper()
	i := strings.LastIndex(addr, ":")
	p, err := strconv.Atoi(addr[i+1:])
	if err != nil {
		tb.Fatalf("redistest: address %q", addr)
	}
	return addr[:i], p
}

func clusterPort(tb testing.TB, s *Server) int {
	tb.Helper()
	kv, err := redis.Strings(s.Do("CONFIG", "GET", "cluster-port"))
	if err != nil || len(kv) != 2 {
		tb.Fatalf("redistest: CONFIG GET cluster-port: %v %v", kv, err)
	}
	p, err := strconv.Atoi(kv[1])
	if err != nil {
		tb.Fatalf("redistest: cluster-port %q", kv[1])
	}
	return p
}

// clusterReady returns "" when s reports cluster_state:ok and n known masters
// with slots, or what is missing.
func clusterReady(s *Server, n int) string {
	c, err := s.Dial()
	if err != nil {
		return err.Error()
	}
	defer c.Close()
	info, err := redis.String(c.Do("CLUSTER", "INFO"))
	if err != nil {
		return err.Error()
	}
	if !strings.Contains(info, "cluster_state:ok") {
		return "cluster_state is not ok"
	}
	if !strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d\r", n)) {
		return "not every master is known"
	}
	slots, err := redis.Values(c.Do("CLUSTER", "SLOTS"))
	if err != nil {
		return err.Error()
	}
	if len(slots) != n {
		return fmt.Sprintf("CLUSTER SLOTS lists %d ranges", len(slots))
	}
	return ""
}

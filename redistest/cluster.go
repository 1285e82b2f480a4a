package redistest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Cluster is a Redis Cluster started by a test.
type Cluster struct {
	// Masters are the servers, in slot order: Masters[i] serves the i-th of equal
	// slot ranges.
	Masters []*Server
	// Replicas[i] replicates Masters[i] (StartClusterWithReplicas).
	Replicas []*Server
	tb       testing.TB
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
	return StartClusterWithReplicas(tb, n, false)
}

func startClusterNode(tb testing.TB) *Server {
	tb.Helper()
	bin := Binary(tb)
	var err error
	for try := 0; try < 5; try++ {
		var bus int
		if bus, err = freePort(); err != nil {
			continue
		}
		// The bus port defaults to port+10000, which freePort never checked.
		// A new one on each try: it may have been taken meanwhile.
		var p *Process
		p, err = Launch(bin, tb.TempDir(), "--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000",
			"--cluster-port", strconv.Itoa(bus))
		if err == nil {
			tb.Cleanup(p.Kill)
			return &Server{Process: p, tb: tb}
		}
	}
	tb.Fatal(err)
	return nil
}

// StartClusterWithReplicas is StartCluster, and with replicas one replica per
// master (CLUSTER REPLICATE), in sync before it returns.
func StartClusterWithReplicas(tb testing.TB, n int, replicas bool) *Cluster {
	tb.Helper()
	if n < 1 || n > 16 {
		tb.Fatalf("redistest: cluster of %d masters", n)
	}
	c := &Cluster{tb: tb}
	for range n {
		c.Masters = append(c.Masters, startClusterNode(tb))
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
	if replicas {
		for _, m := range c.Masters {
			r := startClusterNode(tb)
			host, port := splitAddr(tb, r.Addr())
			if _, err := c.Masters[0].Do("CLUSTER", "MEET", host, port, clusterPort(tb, r)); err != nil {
				tb.Fatalf("redistest: CLUSTER MEET %s: %v", r.Addr(), err)
			}
			c.Replicas = append(c.Replicas, r)
			id, err := redis.String(m.Do("CLUSTER", "MYID"))
			if err != nil {
				tb.Fatalf("redistest: CLUSTER MYID: %v", err)
			}
			// The replica must know the master before it can replicate it.
			c.await("replica "+r.Addr()+" to replicate "+m.Addr(), func() string {
				if _, err := r.Do("CLUSTER", "REPLICATE", id); err != nil {
					return err.Error()
				}
				return ""
			})
		}
	}
	c.await("cluster ready", c.ready)
	return c
}

// await polls check until it returns "" or 30s passed, failing the test then.
func (c *Cluster) await(what string, check func() string) {
	c.tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		msg := check()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			c.tb.Fatalf("redistest: %s: not within 30s: %s", what, msg)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ready returns "" when every node reports cluster_state:ok and knows every
// node, and every replica is in sync with its master, or what is missing.
func (c *Cluster) ready() string {
	all := append(append([]*Server(nil), c.Masters...), c.Replicas...)
	for _, s := range all {
		if msg := clusterReady(s, len(c.Masters), len(all)); msg != "" {
			return s.Addr() + ": " + msg
		}
	}
	masters := map[int64]bool{}
	for _, m := range c.Masters {
		_, p := splitAddr(c.tb, m.Addr())
		masters[int64(p)] = true
	}
	for _, s := range all {
		slots, err := redis.Values(s.Do("CLUSTER", "SLOTS"))
		if err != nil {
			return err.Error()
		}
		for _, rng := range slots {
			v, _ := redis.Values(rng, nil)
			if len(v) < 3 {
				return "short CLUSTER SLOTS entry"
			}
			owner, _ := redis.Values(v[2], nil)
			if len(owner) < 2 {
				return "short CLUSTER SLOTS node"
			}
			if p, _ := redis.Int64(owner[1], nil); !masters[p] {
				return fmt.Sprintf("%s still sees port %d as a master", s.Addr(), p)
			}
		}
	}
	for i, r := range c.Replicas {
		info, err := redis.String(r.Do("INFO", "replication"))
		_, mport := splitAddr(c.tb, c.Masters[i].Addr())
		if err != nil || !strings.Contains(info, "role:slave") || !strings.Contains(info, "master_link_status:up") ||
			!strings.Contains(info, fmt.Sprintf("master_port:%d\r", mport)) {
			return fmt.Sprintf("replica %s not in sync with %s", r.Addr(), c.Masters[i].Addr())
		}
	}
	return ""
}

// Failover promotes the replica of Masters[i] with CLUSTER FAILOVER (a manual
// failover: the replica catches up first) and waits, at most 30s, until the
// cluster agrees; then Masters[i] and Replicas[i] are swapped. It needs
// StartClusterWithReplicas.
func (c *Cluster) Failover(i int) {
	c.tb.Helper()
	if i >= len(c.Replicas) {
		c.tb.Fatalf("redistest: master %d has no replica", i)
	}
	r := c.Replicas[i]
	if _, err := r.Do("CLUSTER", "FAILOVER"); err != nil {
		c.tb.Fatalf("redistest: CLUSTER FAILOVER on %s: %v", r.Addr(), err)
	}
	c.await("failover to "+r.Addr(), func() string {
		info, err := redis.String(r.Do("INFO", "replication"))
		if err != nil || !strings.Contains(info, "role:master") {
			return r.Addr() + " is not a master yet"
		}
		return ""
	})
	c.Masters[i], c.Replicas[i] = r, c.Masters[i]
	c.await("cluster ready after the failover", c.ready)
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

// clusterReady returns "" when s reports cluster_state:ok, knows nodes nodes
// and masters slot ranges, or what is missing.
func clusterReady(s *Server, masters, nodes int) string {
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
	if !strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d\r", nodes)) {
		return "not every node is known"
	}
	slots, err := redis.Values(c.Do("CLUSTER", "SLOTS"))
	if err != nil {
		return err.Error()
	}
	if len(slots) != masters {
		return fmt.Sprintf("CLUSTER SLOTS lists %d ranges", len(slots))
	}
	return ""
}

package redistest_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/redlock-go/redlock/redistest"
)

func TestCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	if got := len(c.Addrs()); got != 3 {
		t.Fatalf("%d masters", got)
	}
	// Each master serves its own third of the slots: a key lands on one only.
	owners := 0
	for _, s := range c.Masters {
		if _, err := s.Do("SET", "{a}", "1"); err == nil {
			owners++
		}
	}
	if owners != 1 {
		t.Fatalf("%d masters accepted a key, want 1", owners)
	}
}

func TestSentinel(t *testing.T) {
	set := redistest.StartSentinel(t, 1, 3)
	old := set.MasterAddr()
	if old != set.Servers[0].Addr() {
		t.Fatalf("primary %s, want %s", old, set.Servers[0].Addr())
	}
	// Replication is asynchronous: wait until the replica has the key, or a
	// failover right after may promote a replica without it. WAIT waits for
	// the writes of its own connection: SET and WAIT share one (Server.Do
	// dials a connection per command, whose WAIT returned at once: the root
	// cause of the nil reads that CI saw now and then).
	conn, err := set.Servers[0].Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Do("SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	if n, err := redis.Int(conn.Do("WAIT", 1, 5000)); err != nil || n != 1 {
		t.Fatalf("WAIT for the replica: %d %v", n, err)
	}
	p := set.Failover()
	if p.Addr() == old {
		t.Fatal("the primary did not change")
	}
	// Read until the key shows; if it never does, say what each server's
	// replication and keyspace were.
	deadline := time.Now().Add(5 * time.Second)
	for {
		v, err := redis.String(p.Do("GET", "k"))
		if err == nil && v == "v" {
			return
		}
		if time.Now().After(deadline) {
			for _, s := range set.Servers {
				info, _ := redis.String(s.Do("INFO", "replication"))
				keys, _ := redis.String(s.Do("INFO", "keyspace"))
				t.Logf("%s: %s%s", s.Addr(), info, keys)
			}
			t.Fatalf("GET on the new primary %s: %q %v", p.Addr(), v, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestClusterFailover(t *testing.T) {
	c := redistest.StartClusterWithReplicas(t, 3, true)
	old := c.Masters[1]
	c.Failover(1)
	if c.Masters[1] == old || c.Replicas[1] != old {
		t.Fatal("the servers were not swapped")
	}
	info, err := redis.String(c.Masters[1].Do("INFO", "replication"))
	if err != nil || !strings.Contains(info, "role:master") {
		t.Fatalf("new master: %q %v", info, err)
	}
}

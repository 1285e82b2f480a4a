package redlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/redistest"
)

// serverCommands returns, for each server, the commands it ran by name
// (INFO commandstats: the scripts' own commands included), without INFO and
// CONFIG (the test's own).
func serverCommands(t *testing.T, servers []*redistest.Server) []map[string]int64 {
	t.Helper()
	out := make([]map[string]int64, len(servers))
	for i, s := range servers {
		out[i] = s.Calls()
		for name := range out[i] {
			if strings.HasPrefix(name, "info") || strings.HasPrefix(name, "config") {
				delete(out[i], name)
			}
		}
	}
	return out
}

// An uncontended Lock+Release costs each node 5 server commands, the
// scripts' own included: the acquire script's SET, the release script's MGET
// (the lock key and the mark of its waiters' queue) and DEL, and the two
// EVALSHA; go-redsync's is 4. The release reads the node's clock and the
// queue only when the queue's mark exists (it was 10: TIME, ZRANGEBYSCORE and
// ZRANGE on every release), tells the key's channel only for a lock whose key
// is watched (a plain lock's waiters queue: it was 7, with EXISTS of the
// queue and PUBLISH on every release), and the acquisition reads the fence
// counter only for a lock fenced at once (it was 8: a GET of the counter on
// every acquisition; issue 26).
func TestUncontendedServerCommands(t *testing.T) {
	servers := redistest.StartN(t, 3)
	replies := map[string]chan struct{}{"acquire": make(chan struct{}, 64), "release": make(chan struct{}, 64)}
	c := dialed(t, servers, redlock.WithHooks(redlock.Hooks{OnNodeReply: func(e redlock.NodeReplyEvent) {
		if ch, ok := replies[e.Op]; ok {
			ch <- struct{}{}
		}
	}}))
	ctx := context.Background()
	// every waits for every node's reply to op: Lock and Release return at
	// a majority, and a grant still in flight at the Release would be undone
	// by another script as it lands (a straggler), which is not the
	// uncontended pair this test counts.
	every := func(op string) {
		for range servers {
			select {
			case <-replies[op]:
			case <-time.After(10 * time.Second):
				t.Fatalf("no %s reply from every node within 10 s", op)
			}
		}
	}
	pair := func() {
		l, err := c.Lock(ctx, "uncontended")
		require.NoError(t, err)
		every("acquire")
		require.NoError(t, l.Release(ctx))
		every("release")
	}
	pair() // scripts loaded, connections dialed
	for _, s := range servers {
		_, err := s.Do("CONFIG", "RESETSTAT")
		require.NoError(t, err)
	}
	const pairs = 20
	for range pairs {
		pair()
	}
	for i, cmds := range serverCommands(t, servers) {
		var total int64
		for _, n := range cmds {
			total += n
		}
		assert.Equal(t, 5.0, float64(total)/pairs, "node %d: %v", i, cmds)
		assert.Equal(t, int64(pairs), cmds["mget"], "node %d: one MGET per pair, the release's: %v", i, cmds)
		assert.Zero(t, cmds["get"], "node %d: the acquisition does not read the fence counter: %v", i, cmds)
		assert.Zero(t, cmds["time"]+cmds["zrangebyscore"]+cmds["zrange"]+cmds["exists"]+cmds["publish"], "node %d: no queue, no clock, nobody to tell: %v", i, cmds)
		t.Logf("node %d: %.1f server commands per pair: %v", i, float64(total)/pairs, cmds)
	}
}

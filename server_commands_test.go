package redlock_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/redistest"
)

// serverCommands returns, for each server, the commands it ran by name
// (INFO commandstats: the scripts' own commands included), without INFO and
// CONFIG (the test's own), and TYPE (its wait).
func serverCommands(t *testing.T, servers []*redistest.Server) []map[string]int64 {
	t.Helper()
	out := make([]map[string]int64, len(servers))
	for i, s := range servers {
		info, err := redis.String(s.Do("INFO", "commandstats"))
		require.NoError(t, err)
		out[i] = map[string]int64{}
		for _, line := range strings.Split(info, "\r\n") {
			name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
			if !ok || strings.HasPrefix(name, "info") || strings.HasPrefix(name, "config") || name == "type" {
				continue
			}
			n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			require.NoError(t, err)
			out[i][name] = n
		}
	}
	return out
}

// An uncontended Lock+Release costs each node at most 8 server commands,
// the scripts' own included: the acquire script's GET of the fence counter
// and SET, the release script's GET, EXISTS of the waiters' queue, DEL and
// PUBLISH, and the two EVALSHA. The release reads the node's clock and the
// queue only when a queue exists (it was 10: TIME, ZRANGEBYSCORE and ZRANGE
// on every release; issue 26).
func TestUncontendedServerCommands(t *testing.T) {
	servers := redistest.StartN(t, 3)
	c := dialed(t, servers)
	ctx := context.Background()
	key := redlock.LockKey(redlock.DefaultKeyPrefix, "uncontended")
	pair := func() {
		l, err := c.Lock(ctx, "uncontended")
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
		// Release returns at a majority, and a node whose grant was still in
		// flight is released as it lands: wait until every node's key is gone
		// (TYPE: a command no script runs, left out of the count).
		for _, s := range servers {
			require.Eventually(t, func() bool {
				typ, err := redis.String(s.Do("TYPE", key))
				return err == nil && typ == "none"
			}, 5*time.Second, time.Millisecond)
		}
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
		assert.LessOrEqual(t, float64(total)/pairs, 8.0, "node %d: %v", i, cmds)
		assert.Zero(t, cmds["time"]+cmds["zrangebyscore"]+cmds["zrange"], "node %d: no queue, no clock: %v", i, cmds)
		t.Logf("node %d: %.1f server commands per pair: %v", i, float64(total)/pairs, cmds)
	}
}

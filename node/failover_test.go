package node_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/node"
)

func replInfo(role, replid, second string) string {
	return fmt.Sprintf("# Replication\r\nrole:%s\r\nmaster_replid:%s\r\nsecond_repl_offset:%s\r\n", role, replid, second)
}

// The failover rules of FailoverGuard, each on its own guard; the adapters'
// tests run them against real Sentinel and Cluster failovers.
func TestFailoverGuard(t *testing.T) {
	const d = 10 * time.Second
	const old = 3600 // seconds
	now := time.Now()
	var fe *node.FailoverError
	for _, tc := range []struct {
		name     string
		observe  func(g *node.FailoverGuard) error
		failover bool // a *FailoverError; otherwise only the restart guard's rules apply
		refused  bool
	}{
		{"long-running primary", func(g *node.FailoverGuard) error {
			return g.Observe("", serverInfo("a", old), replInfo("master", "r1", "-1"), now)
		}, false, false},
		{"young primary", func(g *node.FailoverGuard) error {
			return g.Observe("", serverInfo("a", 1), replInfo("master", "r1", "-1"), now)
		}, false, true},
		{"primary that was a replica", func(g *node.FailoverGuard) error {
			return g.Observe("", serverInfo("a", old), replInfo("master", "r1", "1234"), now)
		}, true, true},
		{"same run_id, new replication id", func(g *node.FailoverGuard) error {
			require.NoError(t, g.Observe("", serverInfo("a", old), replInfo("master", "r1", "-1"), now))
			return g.Observe("", serverInfo("a", old), replInfo("master", "r2", "-1"), now)
		}, true, true},
		{"new Cluster master after Settle", func(g *node.FailoverGuard) error {
			require.NoError(t, g.Observe("m1", serverInfo("a", old), replInfo("master", "r1", "-1"), now))
			g.Settle()
			return g.Observe("m2", serverInfo("b", old), replInfo("master", "r2", "-1"), now)
		}, true, true},
		{"another process", func(g *node.FailoverGuard) error {
			require.NoError(t, g.Observe("", serverInfo("a", old), replInfo("master", "r1", "-1"), now))
			return g.Observe("", serverInfo("b", old), replInfo("master", "r1", "-1"), now)
		}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := node.NewFailoverGuard(d)
			require.NoError(t, err)
			require.NoError(t, tc.observe(g))
			assert.True(t, g.Observed())
			err = g.Refusal()
			if !tc.refused {
				assert.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, node.ErrQuarantined)
			assert.Equal(t, tc.failover, errors.As(err, &fe), "%v", err)
		})
	}

	g, err := node.NewFailoverGuard(d)
	require.NoError(t, err)
	require.ErrorIs(t, g.Observe("", serverInfo("a", old), replInfo("slave", "r1", "-1"), now), node.ErrReplica)
	require.NoError(t, g.Observe("", "redis_mode:sentinel\r\n", "", now), "sentinel connections pass")
	require.ErrorIs(t, g.Observe("", "redis_mode:standalone\r\n", "", now), node.ErrUnexpectedReply)
	_, err = node.NewFailoverGuard(0)
	require.Error(t, err)
}

package harness

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ory/dockertest/v3"
	docker "github.com/ory/dockertest/v3/docker"
	"github.com/stretchr/testify/require"
)

// failedTB reports its test as failed, as a test whose assertions failed
// would, without failing the real one.
type failedTB struct{ testing.TB }

func (failedTB) Failed() bool { return true }

// TestReuse checks WithReuse: a passed test's cluster, left with every fault
// the harness injects (one node killed and disconnected) and with data, scripts, an ACL user, proxy latency and
// open connections, is handed to the next Start with the same options reset
// as Reset promises; other options get a new cluster; a failed test's
// cluster is removed, not reused; RemoveKept removes what was kept.
func TestReuse(t *testing.T) {
	t.Cleanup(func() { require.NoError(t, RemoveKept()) })
	const sha = "e0e1f9fabfc9d4800c877a703b823ac0578ff8db" // SHA-1 of "return 1"
	var first *Cluster
	var open []net.Conn // connections through the proxies, held past the first test
	t.Cleanup(func() {
		for _, c := range open {
			c.Close()
		}
	})
	t.Run("dirty", func(t *testing.T) {
		first = Start(t, 3, WithReuse(), WithClockJumps())
		for _, n := range first.nodes {
			for _, cmd := range [][]string{
				{"SET", "k", "v"},
				{"SCRIPT", "LOAD", "return 1"},
				{"ACL", "SETUSER", "u", "on", ">p", "~*", "+@all"},
			} {
				_, err := command(n.Addr(), cmd...)
				require.NoError(t, err, "%v", cmd)
			}
			open = append(open, proxyPing(t, n.ProxyAddr()))
		}
		n0, n1, n2 := first.Node(0), first.Node(1), first.Node(2)
		n0.SetLatency(50 * time.Millisecond)
		require.NoError(t, n0.SetClockOffset(time.Hour))
		require.NoError(t, n0.Pause())
		require.NoError(t, n1.Disconnect())
		require.NoError(t, n2.Kill())
		require.NoError(t, n2.Disconnect()) // killed and disconnected: connected again before its start
	})
	require.NotNil(t, first)

	t.Run("reused", func(t *testing.T) {
		c := Start(t, 3, WithReuse(), WithClockJumps())
		require.Same(t, first, c, "a passed test's cluster with the same options is reused")
		for _, n := range c.nodes {
			require.Zero(t, n.proxy.latency.Load(), "%s: proxy latency", n.name)
			for _, want := range []struct {
				cmd   []string
				reply []string
			}{
				{[]string{"DBSIZE"}, []string{"0"}},
				{[]string{"SCRIPT", "EXISTS", sha}, []string{"0"}},
				{[]string{"ACL", "USERS"}, []string{"default"}},
			} {
				got, err := command(n.Addr(), want.cmd...)
				require.NoError(t, err, "%s: %v", n.name, want.cmd)
				if want.reply != nil {
					require.Equal(t, want.reply, got, "%s: %v", n.name, want.cmd)
				}
			}
			clients, err := command(n.Addr(), "INFO", "clients")
			require.NoError(t, err)
			require.Contains(t, clients[0], "connected_clients:1\r\n", "%s: only the INFO connection", n.name)
			offset, err := os.ReadFile(filepath.Join(n.clockDir, offsetFile))
			require.NoError(t, err)
			require.Equal(t, "0\n", string(offset), "%s: clock offset", n.name)
			conn := proxyPing(t, n.ProxyAddr())
			conn.Close()
		}
		for _, conn := range open {
			require.NoError(t, conn.SetReadDeadline(time.Now().Add(2*time.Second)))
			_, err := conn.Read(make([]byte, 1))
			require.Error(t, err)
			require.False(t, isTimeout(err), "a connection through the proxy was left open")
		}
		script, err := command(c.Node(0).Addr(), "EVALSHA", sha, "0")
		require.Error(t, err, "the script cache was flushed: %v", script)
		require.Contains(t, err.Error(), "NOSCRIPT")
	})

	t.Run("other options", func(t *testing.T) {
		c := Start(t, 1, WithReuse(), WithClockJumps())
		require.NotSame(t, first, c, "other options: a new cluster")
		require.NotEqual(t, first.ID(), c.ID())
	})

	t.Run("failed", func(t *testing.T) {
		c := Start(t, 3, WithReuse(), WithClockJumps())
		require.Same(t, first, c)
		c.tb = failedTB{t} // the cleanup sees a failed test
	})
	pool := first.pool
	filter := map[string][]string{"label": {clusterKey + "=" + first.ID()}}
	containers, err := pool.Client.ListContainers(docker.ListContainersOptions{All: true, Filters: filter})
	require.NoError(t, err)
	require.Empty(t, containers, "a failed test's cluster is removed")

	var kept *Cluster
	t.Run("new after failure", func(t *testing.T) {
		kept = Start(t, 3, WithReuse(), WithClockJumps())
		require.NotEqual(t, first.ID(), kept.ID())
	})
	require.NoError(t, RemoveKept())
	filter = map[string][]string{"label": {clusterKey + "=" + kept.ID()}}
	containers, err = pool.Client.ListContainers(docker.ListContainersOptions{All: true, Filters: filter})
	require.NoError(t, err)
	require.Empty(t, containers, "RemoveKept removed the kept clusters")
}

// TestStartRemovesLeftovers checks that the first cluster of a process that
// has none removes what a test binary killed before its cleanups (or one
// that panicked, with clusters kept for reuse) left behind.
func TestStartRemovesLeftovers(t *testing.T) {
	require.NoError(t, RemoveKept())
	pool, err := dockertest.NewPool("")
	require.NoError(t, err)
	if err := pool.Client.Ping(); err != nil {
		unavailable(t, fmt.Sprintf("docker not available: %v", err))
	}
	left, err := pool.Client.CreateNetwork(docker.CreateNetworkOptions{
		Name: "redlock-test-leftover-" + randomHex(4), Driver: "bridge", Labels: map[string]string{Label: "1"},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pool.Client.RemoveNetwork(left.ID) })
	Start(t, 1)
	networks, err := pool.Client.FilteredListNetworks(docker.NetworkFilterOpts{"name": {left.Name: true}})
	require.NoError(t, err)
	require.Empty(t, networks, "the leftover network was not removed")
}

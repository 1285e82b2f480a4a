package harness_test

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/ory/dockertest/v3"
	docker "github.com/ory/dockertest/v3/docker"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/faults/harness"
)

const ioTimeout = 2 * time.Second

// dial connects with redigo and closes the connection at cleanup.
func dial(t *testing.T, addr string, opts ...redis.DialOption) redis.Conn {
	t.Helper()
	opts = append([]redis.DialOption{
		redis.DialConnectTimeout(ioTimeout),
		redis.DialReadTimeout(ioTimeout),
		redis.DialWriteTimeout(ioTimeout),
	}, opts...)
	conn, err := redis.Dial("tcp", addr, opts...)
	require.NoError(t, err, "dial %s", addr)
	t.Cleanup(func() { conn.Close() })
	return conn
}

// pingErr opens a fresh connection to addr and sends PING, all bounded by
// timeout.
func pingErr(addr string, timeout time.Duration) error {
	conn, err := redis.Dial("tcp", addr,
		redis.DialConnectTimeout(timeout),
		redis.DialReadTimeout(timeout),
		redis.DialWriteTimeout(timeout))
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = redis.String(conn.Do("PING"))
	return err
}

func TestStartSetGet(t *testing.T) {
	c := harness.Start(t, 3)
	require.Len(t, c.Nodes(), 3)

	seen := map[string]bool{}
	for i, n := range c.Nodes() {
		require.Equal(t, i, n.Index())
		require.NotEmpty(t, n.ContainerID())
		require.Regexp(t, `^127\.0\.0\.1:\d+$`, n.Addr())
		require.Equal(t, "redis://"+n.Addr(), n.URL())
		require.False(t, seen[n.Addr()], "duplicate address %s", n.Addr())
		seen[n.Addr()] = true

		conn := dial(t, n.Addr())
		_, err := conn.Do("SET", "k", "v"+strconv.Itoa(i))
		require.NoError(t, err)
		got, err := redis.String(conn.Do("GET", "k"))
		require.NoError(t, err)
		require.Equal(t, "v"+strconv.Itoa(i), got)

		// The same node through its proxy.
		pconn, err := redis.DialURL(n.ProxyURL(), redis.DialReadTimeout(ioTimeout))
		require.NoError(t, err)
		got, err = redis.String(pconn.Do("GET", "k"))
		require.NoError(t, err)
		require.Equal(t, "v"+strconv.Itoa(i), got)
		require.NoError(t, pconn.Close())
	}
	require.Equal(t, []string{c.Node(0).Addr(), c.Node(1).Addr(), c.Node(2).Addr()}, c.Addrs())
	require.Len(t, c.URLs(), 3)
	require.Len(t, c.ProxyAddrs(), 3)

	// Each node has its own data set.
	got, err := redis.String(dial(t, c.Node(0).Addr()).Do("GET", "k"))
	require.NoError(t, err)
	require.Equal(t, "v0", got)

	// Without WithClockJumps the clock cannot be moved.
	require.Error(t, c.Node(0).SetClockOffset(time.Second))
}

func TestKillStartLosesDataWithoutAOF(t *testing.T) {
	n := harness.Start(t, 1, harness.WithReuse()).Node(0)
	before, proxyBefore := n.Addr(), n.ProxyAddr()

	_, err := dial(t, n.Addr()).Do("SET", "k", "v")
	require.NoError(t, err)

	require.NoError(t, n.Kill())
	require.Error(t, pingErr(before, 200*time.Millisecond), "killed node still answers")
	require.Error(t, pingErr(n.ProxyAddr(), 200*time.Millisecond), "killed node still answers via proxy")

	require.NoError(t, n.Start())
	// Docker 20.10 publishes a new host port on every start; Addr follows.
	t.Logf("addr before kill %s, after start %s", before, n.Addr())
	require.Equal(t, proxyBefore, n.ProxyAddr())

	reply, err := dial(t, n.Addr()).Do("GET", "k")
	require.NoError(t, err)
	require.Nil(t, reply, "data must be gone after SIGKILL without AOF")

	// The proxy follows the node to its new port.
	require.NoError(t, pingErr(n.ProxyAddr(), ioTimeout))
}

func TestAOFSurvivesKillAndRestart(t *testing.T) {
	n := harness.Start(t, 1, harness.WithAOF()).Node(0)

	conn := dial(t, n.Addr())
	aof, err := redis.Strings(conn.Do("CONFIG", "GET", "appendfsync"))
	require.NoError(t, err)
	require.Equal(t, []string{"appendfsync", "always"}, aof)
	_, err = conn.Do("SET", "k", "before-kill")
	require.NoError(t, err)

	require.NoError(t, n.Kill())
	require.NoError(t, n.Start())
	conn = dial(t, n.Addr())
	got, err := redis.String(conn.Do("GET", "k"))
	require.NoError(t, err)
	require.Equal(t, "before-kill", got)

	_, err = conn.Do("SET", "k2", "before-restart")
	require.NoError(t, err)
	require.NoError(t, n.Restart())
	got, err = redis.String(dial(t, n.Addr()).Do("GET", "k2"))
	require.NoError(t, err)
	require.Equal(t, "before-restart", got)
}

func TestStopStartRestart(t *testing.T) {
	n := harness.Start(t, 1, harness.WithReuse()).Node(0)
	addr := n.Addr()

	start := time.Now()
	require.NoError(t, n.Stop())
	t.Logf("Stop took %v", time.Since(start))
	require.Error(t, pingErr(addr, 200*time.Millisecond))
	require.NoError(t, n.Start())
	require.NoError(t, pingErr(n.Addr(), ioTimeout))

	addr = n.Addr()
	start = time.Now()
	require.NoError(t, n.Restart())
	t.Logf("Restart took %v; addr %s -> %s", time.Since(start), addr, n.Addr())
	require.NoError(t, pingErr(n.Addr(), ioTimeout))
}

func TestPauseUnpause(t *testing.T) {
	n := harness.Start(t, 1, harness.WithReuse()).Node(0)
	// Answers are awaited with ioTimeout, however loaded the machine; only
	// the checks that expect no answer use a short timeout.
	require.NoError(t, pingErr(n.Addr(), ioTimeout))

	// A connection opened before the pause: its request is answered late.
	early := dial(t, n.Addr())
	require.NoError(t, n.Pause())

	err := pingErr(n.Addr(), 200*time.Millisecond)
	require.Error(t, err, "paused node answered")
	var ne net.Error
	require.True(t, errors.As(err, &ne) && ne.Timeout(), "want a timeout, got %v", err)

	require.NoError(t, early.Send("PING"))
	require.NoError(t, early.Flush())

	require.NoError(t, n.Unpause())
	require.NoError(t, pingErr(n.Addr(), ioTimeout))
	got, err := redis.String(early.Receive())
	require.NoError(t, err)
	require.Equal(t, "PONG", got)
}

func TestDisconnectReconnect(t *testing.T) {
	n := harness.Start(t, 1, harness.WithReuse()).Node(0)
	before := n.Addr()
	open := dial(t, before)
	_, err := open.Do("SET", "k", "kept")
	require.NoError(t, err)

	require.NoError(t, n.Disconnect())
	err = pingErr(before, 200*time.Millisecond)
	require.Error(t, err, "disconnected node still reachable")
	t.Logf("new connection after Disconnect: %v", err)
	_, err = open.Do("PING")
	require.Error(t, err, "open connection survived Disconnect")
	t.Logf("open connection after Disconnect: %v", err)
	require.Error(t, pingErr(n.ProxyAddr(), 200*time.Millisecond))

	require.NoError(t, n.Reconnect())
	t.Logf("addr before disconnect %s, after reconnect %s", before, n.Addr())
	got, err := redis.String(dial(t, n.Addr()).Do("GET", "k"))
	require.NoError(t, err)
	require.Equal(t, "kept", got, "the process keeps its data across a partition")
	require.NoError(t, pingErr(n.ProxyAddr(), ioTimeout))
}

func TestClockOffset(t *testing.T) {
	n := harness.Start(t, 1, harness.WithClockJumps()).Node(0)
	conn := dial(t, n.Addr())

	serverTime := func() time.Time {
		t.Helper()
		v, err := redis.Int64s(conn.Do("TIME"))
		require.NoError(t, err)
		return time.Unix(v[0], v[1]*1000)
	}
	require.WithinDuration(t, time.Now(), serverTime(), 2*time.Second)

	_, err := conn.Do("SET", "lock", "token", "PX", 30000)
	require.NoError(t, err)
	pttl, err := redis.Int64(conn.Do("PTTL", "lock"))
	require.NoError(t, err)
	require.Greater(t, pttl, int64(25000))

	require.NoError(t, n.SetClockOffset(60*time.Second))
	require.WithinDuration(t, time.Now().Add(60*time.Second), serverTime(), 2*time.Second)
	reply, err := conn.Do("GET", "lock")
	require.NoError(t, err)
	require.Nil(t, reply, "key with PX 30000 must expire after a +60s clock jump")

	require.NoError(t, n.SetClockOffset(-90*time.Second))
	require.WithinDuration(t, time.Now().Add(-90*time.Second), serverTime(), 2*time.Second)
	require.NoError(t, n.SetClockOffset(0))
	require.WithinDuration(t, time.Now(), serverTime(), 2*time.Second)
}

func TestLatencyProxy(t *testing.T) {
	n := harness.Start(t, 1, harness.WithReuse()).Node(0)
	conn := dial(t, n.ProxyAddr())
	timed := func() time.Duration {
		t.Helper()
		start := time.Now()
		got, err := redis.String(conn.Do("PING"))
		require.NoError(t, err)
		require.Equal(t, "PONG", got)
		return time.Since(start)
	}
	base := timed()

	n.SetLatency(50 * time.Millisecond)
	slow := timed()
	require.GreaterOrEqual(t, slow, 50*time.Millisecond)
	// A fresh connection is slow too.
	start := time.Now()
	require.NoError(t, pingErr(n.ProxyAddr(), ioTimeout))
	fresh := time.Since(start)
	require.GreaterOrEqual(t, fresh, 50*time.Millisecond)

	// The direct address is not affected.
	start = time.Now()
	require.NoError(t, pingErr(n.Addr(), ioTimeout))
	direct := time.Since(start)

	// With the latency, every round trip takes at least 2 × 50ms; one
	// shorter round trip shows it is gone. A loaded machine can delay a
	// few, so the fastest of five counts.
	n.SetLatency(0)
	fast := timed()
	for range 4 {
		fast = min(fast, timed())
	}
	t.Logf("PING via proxy: base %v, 50ms latency %v (fresh conn %v), direct %v, latency removed %v",
		base, slow, fresh, direct, fast)
	require.Less(t, fast, 100*time.Millisecond)
}

// TestCleanupRemovesEverything checks that a cluster's containers (even a
// paused one) and its network are gone after its test's cleanup.
func TestCleanupRemovesEverything(t *testing.T) {
	var id string
	t.Run("cluster", func(t *testing.T) {
		c := harness.Start(t, 2)
		id = c.ID()
		require.NoError(t, c.Node(1).Pause())
	})
	if id == "" {
		t.Skip("subtest did not start a cluster")
	}

	pool, err := dockertest.NewPool("")
	require.NoError(t, err)
	filter := map[string][]string{"label": {"redlock.test.cluster=" + id}}
	containers, err := pool.Client.ListContainers(docker.ListContainersOptions{All: true, Filters: filter})
	require.NoError(t, err)
	require.Empty(t, containers)
	networks, err := pool.Client.FilteredListNetworks(docker.NetworkFilterOpts{"label": {"redlock.test.cluster=" + id: true}})
	require.NoError(t, err)
	require.Empty(t, networks)
}

// TestNoDockerSkipsOrFails runs this test binary again against a Docker
// endpoint that does not exist.
func TestNoDockerSkipsOrFails(t *testing.T) {
	if os.Getenv("HARNESS_NO_DOCKER_PROBE") == "1" {
		harness.Start(t, 1)
		t.Fatal("Start returned without Docker")
	}
	run := func(require1 bool) (string, error) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestNoDockerSkipsOrFails$", "-test.v")
		cmd.Env = append(os.Environ(),
			"HARNESS_NO_DOCKER_PROBE=1",
			"DOCKER_HOST=unix:///nonexistent/docker.sock",
			harness.RequireDockerEnv+"=",
		)
		if require1 {
			cmd.Env = append(cmd.Env, harness.RequireDockerEnv+"=1")
		}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}

	out, err := run(false)
	require.NoError(t, err, out)
	require.Contains(t, out, "--- SKIP: TestNoDockerSkipsOrFails")
	require.Contains(t, out, "docker not available:")

	out, err = run(true)
	require.Error(t, err, out)
	require.Contains(t, out, "--- FAIL: TestNoDockerSkipsOrFails")
	require.Contains(t, out, "docker not available:")
}

package harness

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ory/dockertest/v3"
	docker "github.com/ory/dockertest/v3/docker"
)

const (
	// RequireDockerEnv names the environment variable that turns the skip on
	// a missing Docker daemon (or missing redis-server or gcc) into a test
	// failure when set to "1". CI sets it.
	RequireDockerEnv = "REDLOCK_REQUIRE_DOCKER"

	// ClockOffsetFileEnv names the environment variable the clock-offset
	// library reads the offset file's path from, inside the container.
	ClockOffsetFileEnv = "REDLOCK_CLOCK_OFFSET_FILE"

	// MaxNodes is the largest cluster Start accepts.
	MaxNodes = 9

	// DefaultReadyTimeout bounds how long Start, Node.Start, Node.Restart and
	// Node.Reconnect wait for a node to answer PING.
	DefaultReadyTimeout = 15 * time.Second

	redisPort   = docker.Port("6379/tcp")
	clockMount  = "/redlock-clock"
	dataMount   = "/data"
	dockerWait  = 10 * time.Second // bound for waiting on container state changes
	clusterKey  = Label + ".cluster"
	offsetFile  = "offset"
	offsetTemp  = ".offset.tmp"
	pingTimeout = 250 * time.Millisecond
)

// Option configures the nodes Start creates.
type Option func(*config)

type config struct {
	aof          bool
	clock        bool
	args         []string
	readyTimeout time.Duration
	reuse        bool
}

// WithAOF turns on the append-only file with appendfsync always
// (--appendonly yes --appendfsync always) and keeps the data directory in a
// host directory bind-mounted at /data, so every acknowledged write survives
// Kill followed by Start, Stop, Restart and container recreation.
func WithAOF() Option { return func(c *config) { c.aof = true } }

// WithClockJumps makes Node.SetClockOffset available: each node runs with the
// clock-offset library preloaded and reads its offset from a file in a
// bind-mounted host directory.
func WithClockJumps() Option { return func(c *config) { c.clock = true } }

// WithArgs appends redis-server arguments after the harness's defaults
// (--protected-mode no --bind 0.0.0.0 --port 6379 --save "" and the
// persistence settings); Redis lets later arguments override earlier ones.
// Do not change --port.
func WithArgs(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// WithReadyTimeout replaces DefaultReadyTimeout.
func WithReadyTimeout(d time.Duration) Option {
	return func(c *config) { c.readyTimeout = d }
}

// Cluster is a set of Redis containers on one private Docker network. It is
// torn down by a t.Cleanup registered in Start.
type Cluster struct {
	tb      testing.TB
	pool    *dockertest.Pool
	cfg     config
	id      string
	image   string
	dir     string
	network *docker.Network
	nodes   []*Node
	key     string // WithReuse: the key of kept clusters it may stand for
	release func() // gives back the host lock
}

// Start builds the Redis image if needed, creates a Docker network and n
// containers on it, and waits until every node answers PING. Everything is
// removed in t.Cleanup. While another test binary on the host has clusters,
// Start waits (up to HostLockTimeout). Start skips the test when no Docker daemon answers
// (see RequireDockerEnv) and fails it on any other error.
func Start(tb testing.TB, n int, opts ...Option) *Cluster {
	tb.Helper()
	if n < 1 || n > MaxNodes {
		tb.Fatalf("harness.Start: n = %d, want 1..%d", n, MaxNodes)
	}
	cfg := config{readyTimeout: DefaultReadyTimeout}
	for _, o := range opts {
		o(&cfg)
	}

	pool, err := dockertest.NewPool("")
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = pool.Client.PingWithContext(ctx)
		cancel()
	}
	if err != nil {
		unavailable(tb, fmt.Sprintf("docker not available: %v", err))
	}

	image, err := ensureImage(pool.Client)
	if err != nil {
		var pe *prereqError
		if errors.As(err, &pe) {
			unavailable(tb, fmt.Sprintf("redis image prerequisites missing: %v", err))
		}
		tb.Fatalf("harness.Start: %v", err)
	}

	key := cfg.key(n)
	if cfg.reuse {
		if c := takeKept(key); c != nil {
			c.tb = tb
			tb.Cleanup(c.cleanup)
			return c
		}
	}

	release, first, err := acquireHost()
	if err != nil {
		tb.Fatalf("harness.Start: %v", err)
	}
	if first {
		if err := removeLeftovers(pool.Client); err != nil {
			release()
			tb.Fatalf("harness.Start: %v", err)
		}
	}
	c := &Cluster{tb: tb, pool: pool, cfg: cfg, id: randomHex(4), image: image, key: key, release: release}
	tb.Cleanup(c.cleanup)
	c.dir, err = os.MkdirTemp("", "redlock-harness-"+c.id+"-")
	if err != nil {
		tb.Fatalf("harness.Start: %v", err)
	}

	c.network, err = pool.Client.CreateNetwork(docker.CreateNetworkOptions{
		Name:   "redlock-test-" + c.id,
		Driver: "bridge",
		Labels: map[string]string{Label: "1", clusterKey: c.id},
	})
	if err != nil {
		tb.Fatalf("harness.Start: create network: %v", err)
	}

	c.nodes = make([]*Node, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range c.nodes {
		c.nodes[i] = &Node{c: c, index: i, name: fmt.Sprintf("redlock-test-%s-%d", c.id, i)}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.nodes[i].create()
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		tb.Fatalf("harness.Start: %v", err)
	}
	return c
}

// unavailable skips the test with msg, or fails it if RequireDockerEnv is set.
func unavailable(tb testing.TB, msg string) {
	tb.Helper()
	if os.Getenv(RequireDockerEnv) == "1" {
		tb.Fatalf("%s (%s=1, so this is a failure)", msg, RequireDockerEnv)
	}
	tb.Skip(msg)
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// ID is the random identifier in the names of the cluster's network
// ("redlock-test-<id>") and containers ("redlock-test-<id>-<index>"); it is
// also the value of the label redlock.test.cluster on both.
func (c *Cluster) ID() string { return c.id }

// NetworkName is the name of the cluster's Docker network.
func (c *Cluster) NetworkName() string { return c.network.Name }

// Nodes returns the nodes in index order.
func (c *Cluster) Nodes() []*Node { return append([]*Node(nil), c.nodes...) }

// Node returns node i (0-based).
func (c *Cluster) Node(i int) *Node { return c.nodes[i] }

// Addrs returns every node's current Addr.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.Addr()
	}
	return out
}

// URLs returns every node's current URL.
func (c *Cluster) URLs() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.URL()
	}
	return out
}

// ProxyAddrs returns every node's ProxyAddr, which never changes.
func (c *Cluster) ProxyAddrs() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.ProxyAddr()
	}
	return out
}

// cleanup logs the containers' output if the test failed; it then keeps the
// cluster for reuse (WithReuse, the test passed) or removes it.
func (c *Cluster) cleanup() {
	if c.tb.Failed() {
		for _, n := range c.nodes {
			if n != nil && n.id != "" {
				c.tb.Logf("logs of %s (%s):\n%s", n.name, n.Addr(), n.logs(40))
			}
		}
	}
	var err error
	if c.cfg.reuse && !c.tb.Failed() && c.network != nil {
		err = c.keep()
	} else {
		err = c.remove()
	}
	if err != nil {
		c.tb.Errorf("harness cleanup: %v", err)
	}
}

// remove closes the proxies, removes the containers (paused or not) and the
// network, deletes the host directories and gives back the host lock.
func (c *Cluster) remove() error {
	defer c.release()
	var errs []error
	for _, n := range c.nodes {
		if n != nil && n.proxy != nil {
			if err := n.proxy.close(); err != nil && !errors.Is(err, os.ErrClosed) {
				errs = append(errs, fmt.Errorf("close proxy of %s: %w", n.name, err))
			}
		}
	}
	// Remove by label rather than by the IDs we know, so that a container
	// whose creation failed half-way is not left behind.
	containers, err := c.pool.Client.ListContainers(docker.ListContainersOptions{
		All:     true,
		Filters: map[string][]string{"label": {clusterKey + "=" + c.id}},
	})
	if err != nil {
		errs = append(errs, fmt.Errorf("list containers: %w", err))
	}
	for _, ct := range containers {
		err := c.pool.Client.RemoveContainer(docker.RemoveContainerOptions{ID: ct.ID, Force: true, RemoveVolumes: true})
		var nsc *docker.NoSuchContainer
		if err != nil && !errors.As(err, &nsc) {
			errs = append(errs, fmt.Errorf("remove container %s: %w", strings.Join(ct.Names, ","), err))
		}
	}
	if c.network != nil {
		if err := c.pool.Client.RemoveNetwork(c.network.ID); err != nil {
			errs = append(errs, fmt.Errorf("remove network %s: %w", c.network.Name, err))
		}
	}
	if c.dir != "" {
		if err := os.RemoveAll(c.dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeLeftovers removes every container and network that carries the
// harness's label: called by the first cluster of a process that holds the
// host lock, when no process has a cluster.
func removeLeftovers(client *docker.Client) error {
	filter := map[string][]string{"label": {Label + "=1"}}
	containers, err := client.ListContainers(docker.ListContainersOptions{All: true, Filters: filter})
	if err != nil {
		return fmt.Errorf("list leftover containers: %w", err)
	}
	var errs []error
	for _, ct := range containers {
		err := client.RemoveContainer(docker.RemoveContainerOptions{ID: ct.ID, Force: true, RemoveVolumes: true})
		var nsc *docker.NoSuchContainer
		if err != nil && !errors.As(err, &nsc) {
			errs = append(errs, fmt.Errorf("remove leftover container %s: %w", strings.Join(ct.Names, ","), err))
		}
	}
	networks, err := client.FilteredListNetworks(docker.NetworkFilterOpts{"label": {Label + "=1": true}})
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("list leftover networks: %w", err))...)
	}
	for _, nw := range networks {
		if err := client.RemoveNetwork(nw.ID); err != nil {
			errs = append(errs, fmt.Errorf("remove leftover network %s: %w", nw.Name, err))
		}
	}
	return errors.Join(errs...)
}

// nodeDir returns (creating it) a per-node host directory under the
// cluster's temporary directory.
func (c *Cluster) nodeDir(index int, sub string) (string, error) {
	d := filepath.Join(c.dir, fmt.Sprintf("node-%d", index), sub)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return "", err
	}
	return d, nil
}

// logs returns the last lines of the container's stdout and stderr.
func (n *Node) logs(lines int) string {
	var buf bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := n.c.pool.Client.Logs(docker.LogsOptions{
		Context:      ctx,
		Container:    n.id,
		OutputStream: &buf,
		ErrorStream:  &buf,
		Stdout:       true,
		Stderr:       true,
		Tail:         fmt.Sprint(lines),
	})
	if err != nil {
		fmt.Fprintf(&buf, "(reading logs: %v)", err)
	}
	return strings.TrimRight(buf.String(), "\n")
}

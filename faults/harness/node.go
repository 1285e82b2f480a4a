package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ory/dockertest/v3"
	docker "github.com/ory/dockertest/v3/docker"
)

// Node is one Redis container of a Cluster. Its methods may be called from
// any goroutine; they return errors instead of failing the test so that
// faults can be injected concurrently with client traffic.
type Node struct {
	c        *Cluster
	index    int
	name     string
	id       string
	clockDir string // host directory with the offset file; "" without WithClockJumps
	proxy    *proxy

	mu     sync.Mutex
	addr   string
	direct string // the container's address on its network, "" when the host cannot reach it
}

// create runs the container, starts the node's proxy and waits for PING.
func (n *Node) create() error {
	c := n.c
	args := []string{
		"--protected-mode", "no",
		"--bind", "0.0.0.0",
		"--port", "6379",
		"--save", "",
	}
	var env, mounts []string
	if c.cfg.aof {
		dir, err := c.nodeDir(n.index, "data")
		if err != nil {
			return err
		}
		mounts = append(mounts, dir+":"+dataMount)
		args = append(args, "--appendonly", "yes", "--appendfsync", "always", "--dir", dataMount)
	} else {
		args = append(args, "--appendonly", "no")
	}
	if c.cfg.clock {
		dir, err := c.nodeDir(n.index, "clock")
		if err != nil {
			return err
		}
		n.clockDir = dir
		if err := n.SetClockOffset(0); err != nil {
			return err
		}
		mounts = append(mounts, dir+":"+clockMount+":ro")
		env = append(env,
			"LD_PRELOAD="+preloadInImage,
			ClockOffsetFileEnv+"="+clockMount+"/"+offsetFile,
		)
	}
	args = append(args, c.cfg.args...)

	repo, tag, _ := strings.Cut(c.image, ":")
	netName := c.network.Name
	res, err := c.pool.RunWithOptions(&dockertest.RunOptions{
		Name:         n.name,
		Repository:   repo,
		Tag:          tag,
		Cmd:          args,
		Env:          env,
		Mounts:       mounts,
		Labels:       map[string]string{Label: "1", clusterKey: c.id},
		ExposedPorts: []string{string(redisPort)},
		PortBindings: map[docker.Port][]docker.PortBinding{
			redisPort: {{HostIP: "127.0.0.1", HostPort: ""}},
		},
		NetworkID: netName, // endpoint config keyed like NetworkMode, as docker run does
		// Run as the test's user so files in bind-mounted directories stay
		// removable by the test.
		User: fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid()),
	}, func(hc *docker.HostConfig) {
		hc.NetworkMode = netName
		hc.PublishAllPorts = false
		hc.RestartPolicy = docker.RestartPolicy{Name: "no"}
	})
	if err != nil {
		return fmt.Errorf("run %s: %w", n.name, err)
	}
	n.id = res.Container.ID
	if n.proxy, err = newProxy(n.upstream); err != nil {
		return fmt.Errorf("proxy for %s: %w", n.name, err)
	}
	return n.awaitUp()
}

// Name is the container name ("redlock-test-<cluster id>-<index>").
func (n *Node) Name() string { return n.name }

// ContainerID is the Docker container ID.
func (n *Node) ContainerID() string { return n.id }

// Index is the node's position in the cluster (0-based).
func (n *Node) Index() int { return n.index }

// Addr is the node's published address, "127.0.0.1:<host port>". Docker
// picks a new host port every time the container is started again or
// reconnected to its network, so read Addr again after Start, Restart and
// Reconnect. After Kill, Stop or Disconnect it returns the last address,
// which then refuses connections.
func (n *Node) Addr() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.addr
}

// URL is "redis://" + Addr().
func (n *Node) URL() string { return "redis://" + n.Addr() }

// ProxyAddr is the address of a TCP proxy on 127.0.0.1 in front of the node.
// It stays the same for the node's whole life: each new connection is
// forwarded to the node's current address, the container's own on the
// cluster's network when the host reaches it (past Docker's userland proxy,
// which would otherwise carry every byte a second time), else Addr.
// SetLatency slows it down. From the moment Kill, Stop or Disconnect is
// called until the node answers again, connections to the proxy are
// accepted and then closed, and those open are closed, as through Addr.
func (n *Node) ProxyAddr() string { return n.proxy.addr() }

// upstream is where the proxy forwards a new connection.
func (n *Node) upstream() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.direct != "" {
		return n.direct
	}
	return n.addr
}

// ProxyURL is "redis://" + ProxyAddr().
func (n *Node) ProxyURL() string { return "redis://" + n.ProxyAddr() }

// SetLatency makes the proxy hold every chunk of data for d in each
// direction, so a request/response round trip through ProxyAddr takes at
// least 2*d. It applies to data arriving after the call, including on open
// connections; 0 removes the delay. Addr is not affected.
func (n *Node) SetLatency(d time.Duration) { n.proxy.setLatency(d) }

// Kill sends SIGKILL and waits until the container has exited. Without
// WithAOF the node's data is lost.
func (n *Node) Kill() error {
	n.proxy.setDown(true)
	err := n.client().KillContainer(docker.KillContainerOptions{ID: n.id, Signal: docker.SIGKILL})
	var nr *docker.ContainerNotRunning
	if err != nil && !errors.As(err, &nr) {
		n.proxy.setDown(false) // not killed: reachable again (open connections were closed)
		return fmt.Errorf("kill %s: %w", n.name, err)
	}
	return n.awaitExit()
}

// Stop shuts Redis down cleanly: it sends SIGTERM, then stops the container
// with a 1 s timeout (dockertest gives containers the stop signal SIGWINCH,
// which Redis ignores, so StopContainer alone would be a delayed SIGKILL).
func (n *Node) Stop() error {
	n.proxy.setDown(true)
	var nr *docker.ContainerNotRunning
	err := n.client().KillContainer(docker.KillContainerOptions{ID: n.id, Signal: docker.SIGTERM})
	if err != nil && !errors.As(err, &nr) {
		return fmt.Errorf("stop %s: SIGTERM: %w", n.name, err)
	}
	err = n.client().StopContainer(n.id, 1)
	if err != nil && !errors.As(err, &nr) {
		return fmt.Errorf("stop %s: %w", n.name, err)
	}
	return n.awaitExit()
}

// Start starts a killed or stopped node again and waits until it answers
// PING. Its Addr changes.
func (n *Node) Start() error {
	if err := n.client().StartContainer(n.id, nil); err != nil {
		return fmt.Errorf("start %s: %w", n.name, err)
	}
	return n.awaitUp()
}

// Restart is Stop followed by Start: a clean shutdown and a fresh process.
// Its Addr changes.
func (n *Node) Restart() error {
	if err := n.Stop(); err != nil {
		return err
	}
	return n.Start()
}

// Pause freezes every process of the container (cgroup freezer). The port
// stays open and connections are accepted, but nothing is answered, so
// clients see timeouts.
func (n *Node) Pause() error {
	if err := n.client().PauseContainer(n.id); err != nil {
		return fmt.Errorf("pause %s: %w", n.name, err)
	}
	return nil
}

// Unpause resumes a paused node; requests sent meanwhile are then answered.
func (n *Node) Unpause() error {
	if err := n.client().UnpauseContainer(n.id); err != nil {
		return fmt.Errorf("unpause %s: %w", n.name, err)
	}
	return nil
}

// Disconnect removes the container from the cluster's network, its only
// network. Docker then also drops the port publication: the host port is
// closed, new connections to Addr are refused, and connections open through
// it are closed. The Redis process keeps running with its data.
func (n *Node) Disconnect() error {
	n.proxy.setDown(true)
	err := n.client().DisconnectNetwork(n.c.network.ID, docker.NetworkConnectionOptions{Container: n.id})
	if err != nil {
		n.proxy.setDown(false) // still connected: reachable again (open connections were closed)
		return fmt.Errorf("disconnect %s: %w", n.name, err)
	}
	return nil
}

// Reconnect attaches the container to the cluster's network again and waits
// until it answers PING. Docker publishes the port anew: Addr changes.
func (n *Node) Reconnect() error {
	err := n.client().ConnectNetwork(n.c.network.ID, docker.NetworkConnectionOptions{Container: n.id})
	if err != nil {
		return fmt.Errorf("reconnect %s: %w", n.name, err)
	}
	return n.awaitUp()
}

// SetClockOffset shifts the node's wall clock (CLOCK_REALTIME, gettimeofday,
// time) by d, at millisecond resolution, from the next clock read on; the
// monotonic clock is untouched. Offsets are absolute, not cumulative: 0
// restores the real time. Redis expires keys by wall clock, so a positive
// jump expires keys early. It needs WithClockJumps.
func (n *Node) SetClockOffset(d time.Duration) error {
	if n.clockDir == "" {
		return fmt.Errorf("SetClockOffset on %s: the cluster was started without harness.WithClockJumps()", n.name)
	}
	tmp := filepath.Join(n.clockDir, offsetTemp)
	data := []byte(strconv.FormatInt(d.Milliseconds(), 10) + "\n")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("SetClockOffset on %s: %w", n.name, err)
	}
	// rename is atomic: the library reads either the old or the new value.
	if err := os.Rename(tmp, filepath.Join(n.clockDir, offsetFile)); err != nil {
		return fmt.Errorf("SetClockOffset on %s: %w", n.name, err)
	}
	return nil
}

func (n *Node) client() *docker.Client { return n.c.pool.Client }

// awaitExit waits, bounded, until the container is no longer running.
func (n *Node) awaitExit() error {
	ctx, cancel := context.WithTimeout(context.Background(), dockerWait)
	defer cancel()
	if _, err := n.client().WaitContainerWithContext(n.id, ctx); err != nil {
		return fmt.Errorf("wait for %s to exit: %w", n.name, err)
	}
	return nil
}

// awaitUp re-reads the published host port, then waits until the node
// answers PING with PONG, both within the ready timeout. The proxy then
// forwards to the container's address on its network if that answers PING
// too (and REDLOCK_HARNESS_VIA_PORT is not 1), else to the published port.
func (n *Node) awaitUp() error {
	deadline := time.Now().Add(n.c.cfg.readyTimeout)
	var lastErr error
	for {
		c, err := n.client().InspectContainer(n.id)
		if err != nil {
			return fmt.Errorf("inspect %s: %w", n.name, err)
		}
		if !c.State.Running {
			return fmt.Errorf("%s is not running (status %q, exit code %d); logs:\n%s",
				n.name, c.State.Status, c.State.ExitCode, n.logs(20))
		}
		if addr, ok := hostAddr(c); ok {
			n.mu.Lock()
			n.addr = addr
			n.mu.Unlock()
			if lastErr = ping(addr, pingTimeout); lastErr == nil {
				direct := n.containerAddr(c)
				n.mu.Lock()
				n.direct = direct
				n.mu.Unlock()
				n.proxy.setDown(false)
				return nil
			}
		} else {
			lastErr = errors.New("no host port published yet")
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer PING within %v: %v; logs:\n%s",
				n.name, n.c.cfg.readyTimeout, lastErr, n.logs(20))
		}
		time.Sleep(25 * time.Millisecond) // poll interval, bounded by deadline
	}
}

// viaPortEnv, set to 1, makes the proxies forward to the published ports
// (through Docker's userland proxy) even where the host reaches the
// containers' own addresses: the harness's behaviour before 14d2f23 (5
// December 2026), kept for comparisons.
const viaPortEnv = "REDLOCK_HARNESS_VIA_PORT"

// containerAddr returns the container's Redis address on the cluster's
// network if the host reaches it (one PING), else "".
func (n *Node) containerAddr(c *docker.Container) string {
	if os.Getenv(viaPortEnv) == "1" || c.NetworkSettings == nil {
		return ""
	}
	ep, ok := c.NetworkSettings.Networks[n.c.network.Name]
	if !ok || ep.IPAddress == "" {
		return ""
	}
	addr := net.JoinHostPort(ep.IPAddress, redisPort.Port())
	if ping(addr, pingTimeout) != nil {
		return ""
	}
	return addr
}

// hostAddr extracts the 127.0.0.1 binding of the Redis port.
func hostAddr(c *docker.Container) (string, bool) {
	if c.NetworkSettings == nil {
		return "", false
	}
	for _, b := range c.NetworkSettings.Ports[redisPort] {
		if b.HostPort != "" && b.HostPort != "0" {
			ip := b.HostIP
			if ip == "" || ip == "0.0.0.0" {
				ip = "127.0.0.1"
			}
			return net.JoinHostPort(ip, b.HostPort), true
		}
	}
	return "", false
}

// ping sends one RESP PING and expects +PONG. A loading Redis answers
// -LOADING, which counts as not ready.
func ping(addr string, timeout time.Duration) error {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	if _, err := conn.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

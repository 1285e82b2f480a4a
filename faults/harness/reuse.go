package harness

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	docker "github.com/ory/dockertest/v3/docker"
)

// WithReuse lets Start hand out a cluster that an earlier test of this test
// binary started with the same n and options, instead of creating one: a
// cluster whose test passed is reset in that test's cleanup (see Reset) and
// kept, not removed. Creating a cluster costs about 2 s of Docker work and
// removing it about 1 s, 3 s a test; a reset costs tens of milliseconds (and
// a container start for each node a test left killed or stopped).
//
// A kept cluster holds this binary's permission to run containers (the host
// lock) until RemoveKept: call it from TestMain once the tests have run
// (RunTests does).
// A cluster whose test failed is removed as without WithReuse, its logs
// printed, so that the next test gets a new one.
func WithReuse() Option { return func(c *config) { c.reuse = true } }

// kept holds the clusters of this binary that wait to be reused, by key.
var kept struct {
	mu       sync.Mutex
	clusters map[string][]*Cluster
}

// key is what a reused cluster must match: its size and every option.
func (cfg config) key(n int) string {
	return fmt.Sprintf("n=%d aof=%t clock=%t ready=%v args=%q", n, cfg.aof, cfg.clock, cfg.readyTimeout, cfg.args)
}

// takeKept returns a kept cluster for key, answering PING on every node, or
// nil. A kept cluster that does not answer is removed.
func takeKept(key string) *Cluster {
	for {
		kept.mu.Lock()
		list := kept.clusters[key]
		if len(list) == 0 {
			kept.mu.Unlock()
			return nil
		}
		c := list[len(list)-1]
		kept.clusters[key] = list[:len(list)-1]
		kept.mu.Unlock()
		if err := c.answers(); err == nil {
			return c
		}
		_ = c.remove()
	}
}

// answers checks that every node answers PING on its address and through its
// proxy.
func (c *Cluster) answers() error {
	for _, n := range c.nodes {
		if err := ping(n.Addr(), pingTimeout); err != nil {
			return fmt.Errorf("%s: %w", n.name, err)
		}
		if err := ping(n.ProxyAddr(), pingTimeout); err != nil {
			return fmt.Errorf("%s through its proxy: %w", n.name, err)
		}
	}
	return nil
}

// keep resets c and keeps it for the next Start with the same key; if the
// reset fails, it removes c.
// A failed reset is logged, not reported as an error: the test passed, and
// the next Start creates a new cluster.
func (c *Cluster) keep() error {
	if err := c.Reset(); err != nil {
		c.tb.Logf("harness: not kept for reuse, removed: %v", err)
		return c.remove()
	}
	kept.mu.Lock()
	defer kept.mu.Unlock()
	if kept.clusters == nil {
		kept.clusters = map[string][]*Cluster{}
	}
	kept.clusters[c.key] = append(kept.clusters[c.key], c)
	return nil
}

// RemoveKept removes every cluster kept for reuse (WithReuse) and gives back
// the host lock they held. Call it from TestMain after m.Run.
func RemoveKept() error {
	kept.mu.Lock()
	all := kept.clusters
	kept.clusters = nil
	kept.mu.Unlock()
	var errs []error
	for _, list := range all {
		for _, c := range list {
			errs = append(errs, c.remove())
		}
	}
	return errors.Join(errs...)
}

// RunTests runs m's tests, then RemoveKept, and returns the binary's exit
// code: 1 as well if a kept cluster could not be removed. For a package whose
// tests use WithReuse:
//
//	func TestMain(m *testing.M) { os.Exit(harness.RunTests(m)) }
func RunTests(m *testing.M) int {
	code := m.Run()
	if err := RemoveKept(); err != nil {
		fmt.Fprintf(os.Stderr, "harness.RemoveKept: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// Reset brings every node back to what a new cluster's would be, short of
// new containers: running, unpaused and on its network; no proxy latency and
// no clock offset; no data (FLUSHALL, also in the AOF), no cached scripts,
// no ACL users but the default one, statistics reset (CONFIG RESETSTAT), and
// no client connections, also none through the proxy. What it does not undo:
// the Redis process may be one that ran an earlier test (its run_id and
// uptime are not new), and configuration set at run time (CONFIG SET) stays.
func (c *Cluster) Reset() error {
	var errs []error
	for _, n := range c.nodes {
		if err := n.reset(); err != nil {
			errs = append(errs, fmt.Errorf("reset %s: %w", n.name, err))
		}
	}
	return errors.Join(errs...)
}

// reset is Reset for one node.
func (n *Node) reset() error {
	n.proxy.setLatency(0)
	if n.clockDir != "" {
		if err := n.SetClockOffset(0); err != nil {
			return err
		}
	}
	ct, err := n.client().InspectContainer(n.id)
	if err != nil {
		return fmt.Errorf("inspect: %w", err)
	}
	var connected bool
	if ct.NetworkSettings != nil {
		_, connected = ct.NetworkSettings.Networks[n.c.network.Name]
	}
	switch {
	case !ct.State.Running:
		if !connected { // a stopped container can be connected, and is started on its network
			err := n.client().ConnectNetwork(n.c.network.ID, docker.NetworkConnectionOptions{Container: n.id})
			if err != nil {
				return fmt.Errorf("reconnect %s: %w", n.name, err)
			}
		}
		if err := n.Start(); err != nil {
			return err
		}
	case ct.State.Paused:
		if err := n.Unpause(); err != nil {
			return err
		}
		fallthrough
	default:
		if !connected {
			if err := n.Reconnect(); err != nil {
				return err
			}
		} else if err := n.awaitUp(); err != nil { // the address may be stale after an unpause
			return err
		}
	}
	// No connection, through the proxy or not, may write between the flush
	// and the next test: they are closed first, and again after it.
	n.proxy.setDown(true)
	defer n.proxy.setDown(false)
	kill := [][]string{{"CLIENT", "KILL", "TYPE", "normal"}, {"CLIENT", "KILL", "TYPE", "pubsub"}}
	for _, cmd := range kill {
		if _, err := command(n.Addr(), cmd...); err != nil {
			return err
		}
	}
	users, err := command(n.Addr(), "ACL", "USERS")
	if err != nil {
		return err
	}
	cmds := [][]string{{"FLUSHALL", "SYNC"}, {"SCRIPT", "FLUSH", "SYNC"}, {"CONFIG", "RESETSTAT"}}
	for _, u := range users {
		if u != "default" {
			cmds = append(cmds, []string{"ACL", "DELUSER", u})
		}
	}
	for _, cmd := range append(cmds, kill...) {
		if _, err := command(n.Addr(), cmd...); err != nil {
			return err
		}
	}
	return nil
}

// command runs one command on a new connection to addr and returns its reply:
// a status, bulk or integer reply as one string, an array of those as its
// elements; an error reply is an error.
func command(addr string, args ...string) ([]string, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return nil, err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("%s: %w", args[0], err)
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, fmt.Errorf("%s: empty reply", args[0])
	}
	switch line[0] {
	case '+', ':':
		return []string{line[1:]}, nil
	case '-':
		return nil, fmt.Errorf("%s: %s", strings.Join(args, " "), line[1:])
	case '$':
		s, err := bulk(r, line)
		return []string{s}, err
	case '*':
		count, err := strconv.Atoi(line[1:])
		if err != nil {
			return nil, fmt.Errorf("%s: bad reply %q", args[0], line)
		}
		out := make([]string, 0, max(count, 0))
		for range count {
			l, err := r.ReadString('\n')
			if err != nil {
				return nil, err
			}
			l = strings.TrimSuffix(l, "\r\n")
			if strings.HasPrefix(l, ":") || strings.HasPrefix(l, "+") {
				out = append(out, l[1:])
				continue
			}
			s, err := bulk(r, l)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%s: bad reply %q", args[0], line)
}

// bulk reads the body of the bulk string whose header line ("$<len>") is hdr.
func bulk(r *bufio.Reader, hdr string) (string, error) {
	if !strings.HasPrefix(hdr, "$") {
		return "", fmt.Errorf("want a bulk string, got %q", hdr)
	}
	l, err := strconv.Atoi(hdr[1:])
	if err != nil || l < 0 {
		return "", fmt.Errorf("bad bulk length %q", hdr)
	}
	buf := make([]byte, l+2)
	if _, err := io.ReadFull(r, buf); err != nil {
		return "", err
	}
	return string(buf[:l]), nil
}

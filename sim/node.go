package sim

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"

	rnode "github.com/redlock-go/redlock/node"
)

// Node is one simulated Redis instance: a miniredis server inside the bubble,
// with its own clock, that can crash and restart with or without its data.
// Clients reach it only through links (see LinkFaults).
type Node struct {
	w    *World
	idx  int
	name string
	m    *miniredis.Miniredis
	// scripts runs the node's scripts in one interpreter (script.go).
	scripts *scriptHost

	clk nodeClock

	mu       sync.Mutex
	down     bool
	conns    map[*conn]struct{}
	commands int // commands executed
	restarts int // restarts, and how many of them empty
	wipes    int
	lastUp   time.Time // the last restart
	// guards are the restart guards of the clients' nodes for this node
	// (WorldConfig.Quarantine): told of every restart before it accepts a
	// connection.
	guards []*rnode.RestartGuard
}

// nodeClock is a node's wall clock as a function of the bubble's time: a rate
// (1 = exact; 1.01 runs 1 % fast) and steps (forward or backward) at given
// times. miniredis expires keys by this clock: before every command the node
// sets miniredis' time to clock(now), and with ClockTTL each key's TTL shrinks
// by the node time elapsed since the previous command.
type nodeClock struct {
	mu    sync.Mutex
	start time.Time
	rate  float64
	steps []Step
}

// Step is a jump of a node's wall clock by Delta (negative: backward) at At
// (since the start of the run).
type Step struct {
	At    time.Duration
	Delta time.Duration
}

func (c *nodeClock) at(now time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	el := now.Sub(c.start)
	t := c.start.Add(time.Duration(float64(el) * c.rate))
	for _, s := range c.steps {
		if s.At <= el {
			t = t.Add(s.Delta)
		}
	}
	return t
}

func (c *nodeClock) addStep(s Step) {
	c.mu.Lock()
	c.steps = append(c.steps, s)
	c.mu.Unlock()
}

func newNode(w *World, idx int, rate float64, steps []Step) *Node {
	n := &Node{w: w, idx: idx, name: fmt.Sprintf("n%d", idx+1), conns: map[*conn]struct{}{}}
	n.clk = nodeClock{start: w.start, rate: rate, steps: append([]Step(nil), steps...)}
	n.m, n.scripts = newServer()
	n.m.SetTime(w.start)
	n.m.ClockTTL(true)
	return n
}

// Name returns the node's name (n1, n2, ...).
func (n *Node) Name() string { return n.name }

// syncClock sets miniredis' clock to the node's clock reading now.
func (n *Node) syncClock() { n.atOnce(n.setClock) }

// setClock is syncClock inside atOnce.
func (n *Node) setClock() { n.m.SetTime(n.clk.at(time.Now())) }

// atOnce runs f, which works on miniredis directly (not through a
// connection), between the node's commands: never between two calls of one
// script (the script host's mutex, script.go).
func (n *Node) atOnce(f func()) {
	n.scripts.mu.Lock()
	defer n.scripts.mu.Unlock()
	f()
}

// accept is the node's side of a dial: a fresh in-memory connection to the
// server, or "connection refused" while the node is down.
func (n *Node) accept() (net.Conn, error) {
	n.mu.Lock()
	down := n.down
	n.mu.Unlock()
	if down {
		return nil, &net.OpError{Op: "dial", Net: "sim", Err: syscall.ECONNREFUSED}
	}
	return n.m.Dial()
}

func (n *Node) track(c *conn) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.down {
		return false
	}
	n.conns[c] = struct{}{}
	return true
}

func (n *Node) untrack(c *conn) {
	n.mu.Lock()
	delete(n.conns, c)
	n.mu.Unlock()
}

// exec is called just before a request is handed to the server: it sets the
// node's clock and records the command. It reports false if the node is down.
func (n *Node) exec(l *link, seq int, cmd string) bool {
	n.mu.Lock()
	down := n.down
	if !down {
		n.commands++
	}
	n.mu.Unlock()
	if down {
		n.w.recordNet(l, seq, cmd+": node down, lost")
		return false
	}
	n.syncClock()
	if n.w.hist.netLog {
		n.w.recordNet(l, seq, cmd+fmt.Sprintf(" runs (node clock %+v)", n.clk.at(time.Now()).Sub(time.Now()).Round(time.Microsecond)))
	}
	return true
}

// Crash stops the node: every connection is reset and dials are refused until
// Restart.
func (n *Node) Crash() {
	n.mu.Lock()
	n.down = true
	conns := make([]*conn, 0, len(n.conns))
	for c := range n.conns {
		conns = append(conns, c)
	}
	n.mu.Unlock()
	for _, c := range conns {
		c.kill(errReset)
	}
	n.w.record(n.name, "crashes (connections reset, dials refused)")
}

// Restart brings a crashed node back. With empty, it has lost everything (no
// persistence): keys and fence counters. Without, it has kept every
// acknowledged write (AOF with appendfsync always); keys whose TTL ran out
// meanwhile on the node's clock are gone. Either way its script cache is
// empty, as Redis never persists it: the next EVALSHA gets NOSCRIPT.
func (n *Node) Restart(empty bool) {
	n.atOnce(func() {
		if empty {
			n.setClock()
			n.m.FlushAll()
		}
		n.scripts.flush()
	})
	n.mu.Lock()
	// The guards learn of the restart before the node takes a connection:
	// every grant script sent from now on is refused by the client until
	// the quarantine ends. Any restart counts, with data or not: a client
	// cannot tell (a restart guard that reads INFO quarantines both too).
	guards := n.guards
	n.lastUp = time.Now()
	for _, g := range guards {
		g.Restarted(n.lastUp)
	}
	n.restarts++
	if empty {
		n.wipes++
	}
	n.down = false
	n.mu.Unlock()
	if empty {
		n.w.record(n.name, "restarts EMPTY (keys, fence counters and scripts lost)")
	} else {
		n.w.record(n.name, "restarts with its data (AOF)")
	}
	if len(guards) > 0 {
		n.w.record(n.name, fmt.Sprintf("the clients' restart guards quarantine it until %s", fmtDur(n.w.since()+n.w.quarantine)))
	}
}

// addGuard registers a client's guard. A client that first meets the node
// after a restart quarantines it from that restart (what a guard reading
// INFO's uptime does).
func (n *Node) addGuard(g *rnode.RestartGuard) {
	n.mu.Lock()
	n.guards = append(n.guards, g)
	if !n.lastUp.IsZero() {
		g.Restarted(n.lastUp)
	}
	n.mu.Unlock()
}

// Evict deletes key on the node, as an eviction policy or an operator would.
func (n *Node) Evict(key string) (ok bool) {
	n.atOnce(func() {
		n.setClock()
		ok = n.m.Del(key)
	})
	n.w.record(n.name, fmt.Sprintf("evicts %s (present: %v)", key, ok))
	return ok
}

// Step moves the node's wall clock by delta now.
func (n *Node) Step(delta time.Duration) {
	n.clk.addStep(Step{At: n.w.since(), Delta: delta})
	n.w.record(n.name, fmt.Sprintf("clock steps %+v", delta))
}

// Holds reports whether key currently holds value on the node (by its clock).
func (n *Node) Holds(key, value string) bool {
	v, ok := n.Get(key)
	return ok && v == value
}

// Get returns key's value on the node, and whether it exists.
func (n *Node) Get(key string) (v string, ok bool) {
	n.atOnce(func() {
		n.setClock()
		var err error
		v, err = n.m.Get(key)
		ok = err == nil
	})
	return v, ok
}

// TTL returns key's remaining time to live on the node's clock (0 if none).
func (n *Node) TTL(key string) (ttl time.Duration) {
	n.atOnce(func() {
		n.setClock()
		if n.m.Exists(key) {
			ttl = n.m.TTL(key)
		}
	})
	return ttl
}

// snapshot is a copy of a node's string keys with their remaining TTLs.
type snapshot struct {
	at   time.Duration
	keys map[string]snapKey
}

type snapKey struct {
	val string
	ttl time.Duration // 0: none
}

func (n *Node) snapshot() snapshot {
	s := snapshot{at: n.w.since(), keys: map[string]snapKey{}}
	n.atOnce(func() {
		n.setClock()
		for _, k := range n.m.Keys() {
			v, err := n.m.Get(k)
			if err != nil {
				continue
			}
			s.keys[k] = snapKey{val: v, ttl: n.m.TTL(k)}
		}
	})
	return s
}

// FailOver replaces the node's data by a replica's: the snapshot, as it would
// look now (TTLs shortened by the node time elapsed since it was taken).
func (n *Node) failOver(s snapshot, elapsed time.Duration) {
	n.atOnce(func() {
		n.setClock()
		n.m.FlushAll()
		n.scripts.flush()
		for k, e := range s.keys {
			if e.ttl != 0 && e.ttl <= elapsed {
				continue
			}
			_ = n.m.Set(k, e.val)
			if e.ttl != 0 {
				n.m.SetTTL(k, e.ttl-elapsed)
			}
		}
	})
	n.w.record(n.name, fmt.Sprintf("fails over to a replica lagging %v (keys: %s)", elapsed.Round(time.Microsecond), s.describe()))
}

func (s snapshot) describe() string {
	var parts []string
	for k, e := range s.keys {
		parts = append(parts, k+"="+short(e.val))
	}
	if len(parts) == 0 {
		return "none"
	}
	sortStrings(parts)
	return strings.Join(parts, ", ")
}

func (n *Node) close() {
	n.mu.Lock()
	conns := make([]*conn, 0, len(n.conns))
	for c := range n.conns {
		conns = append(conns, c)
	}
	n.mu.Unlock()
	for _, c := range conns {
		c.kill(net.ErrClosed)
	}
	n.m.Close()
}

// describe summarises a RESP request for the timeline: the command, the
// script's name for EVAL/EVALSHA, and the first key.
func describe(b []byte, names *scriptNames, alias func(string) string) string {
	args := parseRESP(b)
	if len(args) == 0 {
		return "?"
	}
	cmd := strings.ToUpper(args[0])
	switch cmd {
	case "EVALSHA", "EVAL":
		if len(args) < 4 {
			return cmd
		}
		name := scriptName(cmd, args[1], names)
		nk, _ := strconv.Atoi(args[2])
		rest := args[3:]
		var ks, vs []string
		for i, a := range rest {
			if i < nk {
				ks = append(ks, a)
			} else {
				vs = append(vs, alias(a))
			}
		}
		return fmt.Sprintf("%s %s %s %s", cmd, name, strings.Join(ks, " "), strings.Join(vs, " "))
	}
	return strings.Join(args, " ")
}

// parseRESP reads one RESP array of bulk strings (what redigo sends).
func parseRESP(b []byte) []string {
	r := bufio.NewReader(strings.NewReader(string(b)))
	line, err := r.ReadString('\n')
	if err != nil || len(line) < 2 || line[0] != '*' {
		return nil
	}
	n, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
	out := make([]string, 0, n)
	for i := 0; i < n; i++ {
		h, err := r.ReadString('\n')
		if err != nil || len(h) < 2 || h[0] != '$' {
			return out
		}
		l, _ := strconv.Atoi(strings.TrimSpace(h[1:]))
		buf := make([]byte, l+2)
		if _, err := ioReadFull(r, buf); err != nil {
			return out
		}
		out = append(out, string(buf[:l]))
	}
	return out
}

// scriptNames maps script digests to names, learned from EVAL bodies (one
// map per run, so that a run's timeline does not depend on other runs).
type scriptNames struct {
	mu    sync.Mutex
	names map[string]string
}

// scriptName names the library's Lua scripts: by node.Scripts' names (the
// world knows them from the start), or by a script's leading comment ("--
// Acquire: ..."), learned from the EVAL that follows a NOSCRIPT.
func scriptName(cmd, arg string, s *scriptNames) string {
	if cmd == "EVAL" {
		name := "script"
		if strings.HasPrefix(arg, "-- ") {
			if i := strings.IndexAny(arg[3:], ":\n "); i > 0 {
				name = strings.ToLower(arg[3 : 3+i])
			}
		}
		s.mu.Lock()
		s.names[sha1hex(arg)] = name
		s.mu.Unlock()
		return name
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if name, ok := s.names[arg]; ok {
		return name
	}
	return short(arg)
}

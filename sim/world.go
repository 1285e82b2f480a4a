package sim

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/fence"
	"github.com/redlock-go/redlock/node"
)

// World is one simulated deployment: N nodes, the links from every client to
// every node, and the protected resources. It must be created and used inside
// a testing/synctest bubble: time is the bubble's virtual clock.
type World struct {
	Seed        uint64
	TTL         time.Duration
	NodeTimeout time.Duration
	DriftFactor float64

	breaker    bool
	quarantine time.Duration
	start      time.Time
	done       chan struct{}
	nodes      []*Node
	links      [][]*link // [client][node]
	scripts    scriptNames

	hist *History

	// quarantined counts failed acquisitions in which a restart guard
	// refused a node.
	quarantined atomic.Int64

	// onGrant, if set, is told of every grant of a non-silent holder (the
	// adaptive fault driver and the prober).
	onGrant func(grantEvent)

	// The fenced resource: it refuses a token lower than one it accepted.
	// The plain register (a resource without fencing) takes every write: it
	// is the history's list of writes itself.
	fenced fence.Value[string]

	mu      sync.Mutex
	names   []string
	aliases map[string]string // lock token -> "A.3" (client A's third token)
	issued  map[int]int
	clients []*redlock.Client
	pools   []*redis.Pool
	rnodes  []node.Node
	closed  bool
}

// WorldConfig describes a deployment.
type WorldConfig struct {
	Seed        uint64
	Nodes       int
	Clients     int
	TTL         time.Duration
	NodeTimeout time.Duration
	DriftFactor float64
	// Rates and Steps give each node's clock (default: rate 1, no steps).
	Rates []float64
	Steps [][]Step
	// Links gives the faults of the link from client c to node n.
	Links func(c, n int) LinkFaults
	// Names names the clients in the timeline (default A, B, C, ...).
	Names []string
	// Breaker turns the clients' node circuit breakers on (see Profile.Breaker).
	Breaker bool
	// NetLog records every message in the timeline (scripted scenarios and
	// replays turn it on; it costs a little time).
	NetLog bool
	// Quarantine, if positive, gives every client's node a restart guard
	// (node.WithRestartGuard) with this quarantine, which the world feeds
	// (RestartGuard.Restarted) whenever the node restarts: the delayed
	// restart of P5, enforced by the clients. Give at least the longest TTL
	// plus the drift allowance.
	Quarantine time.Duration
}

// libraryScripts names the library's scripts by their digests, so that an
// EVALSHA is named even before the EVAL that would teach the name.
func libraryScripts() map[string]string {
	m := map[string]string{}
	for _, s := range node.Scripts() {
		m[s.Hash()] = s.Name()
	}
	return m
}

// NewWorld builds a world. Call it inside a synctest bubble.
func NewWorld(cfg WorldConfig) *World {
	w := &World{
		Seed: cfg.Seed, TTL: cfg.TTL, NodeTimeout: cfg.NodeTimeout, DriftFactor: cfg.DriftFactor,
		breaker: cfg.Breaker, quarantine: cfg.Quarantine,
		start:   time.Now(),
		done:    make(chan struct{}),
		scripts: scriptNames{names: libraryScripts()},
		aliases: map[string]string{}, issued: map[int]int{},
	}
	w.hist = &History{start: w.start, netLog: cfg.NetLog}
	for c := 0; c < cfg.Clients; c++ {
		name := clientName(c)
		if c < len(cfg.Names) && cfg.Names[c] != "" {
			name = cfg.Names[c]
		}
		w.names = append(w.names, name)
	}
	for i := 0; i < cfg.Nodes; i++ {
		rate := 1.0
		if i < len(cfg.Rates) && cfg.Rates[i] > 0 {
			rate = cfg.Rates[i]
		}
		var steps []Step
		if i < len(cfg.Steps) {
			steps = cfg.Steps[i]
		}
		w.nodes = append(w.nodes, newNode(w, i, rate, steps))
	}
	for c := 0; c < cfg.Clients; c++ {
		row := make([]*link, cfg.Nodes)
		for n := range row {
			var f LinkFaults
			if cfg.Links != nil {
				f = cfg.Links(c, n)
			}
			row[n] = &link{
				w: w, client: c, node: w.nodes[n], faults: f,
				seed: cfg.Seed ^ (uint64(c)<<32|uint64(n)|0x11<<56)*0x9e3779b97f4a7c15,
			}
		}
		w.links = append(w.links, row)
	}
	return w
}

// Replica is a copy of a node's data at one moment: what an asynchronous
// replica holds.
type Replica struct {
	s    snapshot
	rate float64
}

// Snapshot copies node i's data now.
func (w *World) Snapshot(i int) Replica {
	n := w.nodes[i]
	return Replica{s: n.snapshot(), rate: n.clk.rate}
}

// FailOver replaces node i by a replica that stopped replicating when r was
// taken: its keys are r's, with TTLs shortened by the time since.
func (w *World) FailOver(i int, r Replica) {
	elapsed := time.Duration(float64(w.since()-r.s.at) * r.rate)
	w.nodes[i].failOver(r.s, elapsed)
}

// ClientName returns client c's name in the timeline.
func (w *World) ClientName(c int) string { return w.names[c] }

// Node returns node i.
func (w *World) Node(i int) *Node { return w.nodes[i] }

// Nodes returns the number of nodes.
func (w *World) Nodes() int { return len(w.nodes) }

// History returns the run's history.
func (w *World) History() *History { return w.hist }

// Partition cuts the link from client c to node n during iv.
func (w *World) Partition(c, n int, iv Interval) { w.links[c][n].addPartition(iv) }

// Commands returns how many commands the nodes executed.
func (w *World) Commands() int {
	total := 0
	for _, n := range w.nodes {
		n.mu.Lock()
		total += n.commands
		n.mu.Unlock()
	}
	return total
}

// Quarantined returns how many failed acquisitions had a node refused by a
// restart guard.
func (w *World) Quarantined() int { return int(w.quarantined.Load()) }

// Restarts returns how many times the nodes restarted, and how many of those
// restarts were empty (wipes).
func (w *World) Restarts() (restarts, wipes int) {
	for _, n := range w.nodes {
		n.mu.Lock()
		restarts += n.restarts
		wipes += n.wipes
		n.mu.Unlock()
	}
	return restarts, wipes
}

// Since returns the virtual time elapsed since the world was created.
func (w *World) Since() time.Duration { return w.since() }

func (w *World) since() time.Duration { return time.Since(w.start) }

// NewClient returns a redlock.Client for client c: its own node.Redis (with
// its own redigo pool) per node, each connection going through the link from
// c to that node. The client uses the world's TTL, node timeout and drift
// factor, plus opts.
func (w *World) NewClient(c int, opts ...redlock.Option) (*redlock.Client, error) {
	nodes := make([]node.Node, len(w.nodes))
	for i, n := range w.nodes {
		l := w.links[c][i]
		pool := &redis.Pool{
			MaxIdle: 4,
			DialContext: func(ctx context.Context) (redis.Conn, error) {
				nc, err := l.dial(ctx)
				if err != nil {
					return nil, err
				}
				return redis.NewConn(nc, w.NodeTimeout, w.NodeTimeout), nil
			},
		}
		nopts := []node.Option{node.WithTimeout(w.NodeTimeout)}
		if w.quarantine > 0 {
			// The pool dials, so the node cannot see restarts itself (and
			// miniredis' INFO has no server section to see them by): the
			// world tells the guard, as an orchestrator would.
			g, err := node.NewRestartGuard(w.quarantine)
			if err != nil {
				return nil, err
			}
			nopts = append(nopts, node.WithRestartGuard(g))
			n.addGuard(g)
		}
		rn, err := node.FromPool(pool, n.name, nopts...)
		if err != nil {
			return nil, err
		}
		nodes[i] = rn
		w.mu.Lock()
		w.pools = append(w.pools, pool)
		w.rnodes = append(w.rnodes, rn)
		w.mu.Unlock()
	}
	all := []redlock.Option{
		redlock.WithTTL(w.TTL),
		redlock.WithNodeTimeout(w.NodeTimeout),
		redlock.WithDriftFactor(w.DriftFactor),
	}
	if !w.breaker {
		all = append(all, redlock.WithBreaker(0))
	}
	all = append(all, opts...)
	cl, err := redlock.New(nodes, all...)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	w.clients = append(w.clients, cl)
	w.mu.Unlock()
	return cl, nil
}

// Close closes the clients (waiting for their background work), the pools and
// the nodes, so that every goroutine of the bubble can exit.
func (w *World) Close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	clients, pools, rnodes := w.clients, w.pools, w.rnodes
	w.mu.Unlock()
	for _, c := range clients {
		_ = c.Close()
	}
	close(w.done)
	for _, n := range rnodes {
		_ = n.Close()
	}
	for _, p := range pools {
		_ = p.Close()
	}
	for _, n := range w.nodes {
		n.close()
	}
}

// alias names a lock token (a random 32-digit hex value) after the client
// that sent it and its rank among that client's tokens: "A.3". Tokens are
// random, their aliases are not, so timelines of one seed compare equal.
// Other strings are returned shortened.
func (w *World) alias(client int, s string) string {
	if !isToken(s) {
		return short(s)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if a, ok := w.aliases[s]; ok {
		return a
	}
	w.issued[client]++
	a := fmt.Sprintf("%s.%d", w.names[client], w.issued[client])
	w.aliases[s] = a
	return a
}

// TokenAlias returns the alias of a lock token ("?" if never sent).
func (w *World) TokenAlias(token string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if a, ok := w.aliases[token]; ok {
		return a
	}
	return "?"
}

func isToken(s string) bool {
	if len(s) != 32 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func (w *World) record(actor, text string) { w.hist.add(w.since(), actor, normalize(text)) }

// normalize reports every timeout the same way: a node call has two timers
// that end at the same virtual instant (its context's deadline and the
// connection's read deadline), and which one the client notices first is up
// to the Go scheduler. The outcome is the same failed vote.
func normalize(s string) string {
	if !strings.Contains(s, "timeout") && !strings.Contains(s, "deadline") {
		return s
	}
	return timeoutRE.ReplaceAllString(s, "timeout")
}

var timeoutRE = regexp.MustCompile(`(read sim: )?(i/o timeout|context deadline exceeded)`)

func (w *World) recordNet(l *link, seq int, text string) {
	if !w.hist.netLog {
		return
	}
	w.hist.add(w.since(), "net", fmt.Sprintf("%s #%d %s", l.name(), seq, text))
}

// Event is one line of the timeline.
type Event struct {
	At    time.Duration
	Actor string
	Text  string
	seq   int
}

// History is everything a run recorded: the timeline, the grants and the
// writes to the protected resource.
type History struct {
	mu     sync.Mutex
	start  time.Time
	netLog bool
	events []Event
	grants []*Grant
	writes []*Write
}

func (h *History) add(at time.Duration, actor, text string) {
	h.mu.Lock()
	h.events = append(h.events, Event{At: at, Actor: actor, Text: text, seq: len(h.events)})
	h.mu.Unlock()
}

// Events returns the timeline in a canonical order, so that two replays of
// a seed print the same lines: by time, then actor; within one instant, a
// client's or node's events keep the order they happened in (one goroutine
// records them), while network events, recorded by many goroutines at once,
// are sorted by text.
func (h *History) Events() []Event {
	h.mu.Lock()
	ev := append([]Event(nil), h.events...)
	h.mu.Unlock()
	sort.SliceStable(ev, func(i, j int) bool {
		a, b := ev[i], ev[j]
		if a.At != b.At {
			return a.At < b.At
		}
		if a.Actor != b.Actor {
			return a.Actor < b.Actor
		}
		if a.Actor == "net" && a.Text != b.Text {
			return a.Text < b.Text
		}
		return a.seq < b.seq
	})
	return ev
}

// Timeline renders the events, one per line.
func (h *History) Timeline() string {
	var b strings.Builder
	for _, e := range h.Events() {
		fmt.Fprintf(&b, "%12s  %-4s %s\n", fmtDur(e.At), e.Actor, e.Text)
	}
	return b.String()
}

// Digest is a short hash of the timeline: two runs of one seed must agree.
func (h *History) Digest() string { return sha1hex(h.Timeline())[:16] }

// Grants returns the grants recorded so far.
func (h *History) Grants() []*Grant {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*Grant(nil), h.grants...)
}

// Writes returns the writes recorded so far.
func (h *History) Writes() []*Write {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*Write(nil), h.writes...)
}

// Grant is one successful acquisition, as its holder saw it. Times are
// virtual, measured from the start of the run.
type Grant struct {
	ID     string
	Client int
	// Started is when TryLock was called; Acquired when it returned the lock
	// (from then on the holder may act).
	Started, Acquired time.Duration
	// Until is the end of validity (Lock.Until), as last extended.
	Until time.Duration
	// Released is when Release was called; -1 if the holder walked away.
	Released time.Duration
	// Fence is the fencing token (0: none); FencedAt when Fence returned it.
	Fence    uint64
	FencedAt time.Duration
	// Path is how it was taken: PathTryLock, PathLock, PathLockMulti or
	// PathDoMulti.
	Path string

	token     string
	lock      *redlock.Lock
	multi     *redlock.MultiLock // a LockMulti grant: lock is Resource's
	lastWrite time.Duration      // set by Check
}

// ValidEnd is when the grant stopped being valid: its last Until, or its
// release if earlier.
func (g *Grant) ValidEnd() time.Duration {
	end := g.Until
	if g.Released >= 0 && g.Released < end {
		end = g.Released
	}
	return end
}

// Write is one protected write: made by a grant after checking its validity.
type Write struct {
	Grant *Grant
	// CheckedAt is when the holder checked time.Now().Before(Until); At when
	// the write took effect (after any pause).
	CheckedAt, At time.Duration
	// Token is the fencing token presented to the fenced resource.
	Token uint64
	// Accepted: whether the fenced resource took it (the plain register takes
	// every write).
	Accepted bool
}

func (h *History) addGrant(g *Grant) {
	h.mu.Lock()
	h.grants = append(h.grants, g)
	h.mu.Unlock()
}

func (h *History) addWrite(wr *Write) {
	h.mu.Lock()
	h.writes = append(h.writes, wr)
	h.mu.Unlock()
}

func fmtDur(d time.Duration) string {
	return fmt.Sprintf("%.3fms", float64(d)/float64(time.Millisecond))
}

func sha1hex(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

func short(s string) string {
	if len(s) > 12 {
		return s[:8] + "…"
	}
	return s
}

func sortStrings(s []string) { sort.Strings(s) }

func ioReadFull(r io.Reader, b []byte) (int, error) { return io.ReadFull(r, b) }

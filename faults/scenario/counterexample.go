package scenario

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/redlock-go/redlock"
)

// CounterexampleResource is the resource of the constructed counterexamples.
// The workload's clients never lock it, so nothing but the construction
// touches its keys.
const CounterexampleResource = "cx"

// DefaultCounterexampleLease is the default lease of the two clients of a
// counterexample.
const DefaultCounterexampleLease = 30 * time.Second

// Counterexample is the deterministic construction of the overlap that a
// broken precondition allows, on a three-node cluster:
//
//  1. a warm-up grant on every node gives each a fence counter of the
//     resource, as a resource in use has;
//  2. a dummy owner takes the lock key on node Blocker;
//  3. client A acquires: its majority is exactly the two other nodes, Victim
//     among them; it fences and writes to the resource;
//  4. Fault makes Victim forget A's key, and the construction checks that it
//     did;
//  5. the dummy owner frees Blocker;
//  6. client B, dialed only now (no connection of it was cut by the fault),
//     acquires the majority {Victim, Blocker} while A's validity has not
//     ended: both hold the lock. B fences and, if it got a token, writes;
//  7. A, still valid by its own clock, writes again; B, then A, release.
//
// Every step checks the state it needs before the next one (keys on the nodes,
// validity left), and a step that cannot be taken fails the construction
// with what it saw: it never depends on a lucky timing.
type Counterexample struct {
	// Victim is the node the fault hits, Blocker the one the dummy owner
	// holds while A acquires (indices; the third node is A's other one).
	Victim, Blocker int
	// What describes the fault in the timeline.
	What string
	// Fault makes Victim forget A's lock key (an empty restart, a clock
	// step); it may return only once the node answers again.
	Fault func() error
	// Lease is A's and B's TTL (default DefaultCounterexampleLease): long
	// enough that the fault and B's acquisition fall inside A's validity on
	// a loaded machine. Whether they did is checked, not assumed.
	Lease time.Duration
}

// Constructed is what a counterexample produced: its two grants, as the run
// records them (the checker sees them with the workload's), and the steps it
// took, for the report.
type Constructed struct {
	A, B  *Grant
	Steps []string
}

// Counterexample runs cx against the run's cluster, with two clients of its
// own dialed with the run's client options. The run's checker must then find
// the overlap of A and B; Finish fails the test if it does not. An error means
// that the counterexample could not be constructed: it says at which step, and
// what was seen up to there.
func (r *Run) Counterexample(cx Counterexample) (*Constructed, error) {
	if n := len(r.cfg.Cluster.Nodes()); n != 3 {
		return nil, fmt.Errorf("counterexample: the cluster has %d nodes, want 3", n)
	}
	if cx.Victim == cx.Blocker || cx.Victim < 0 || cx.Victim > 2 || cx.Blocker < 0 || cx.Blocker > 2 {
		return nil, fmt.Errorf("counterexample: victim %d and blocker %d must be two different nodes of 0..2", cx.Victim, cx.Blocker)
	}
	if cx.Lease == 0 {
		cx.Lease = DefaultCounterexampleLease
	}
	// Start from healthy fencing, as a round does: the victim's wipe takes
	// every resource's counter off it, and a resource whose counter was then
	// on only one other node (its first fenced grant held two nodes, not yet
	// repaired) could never be fenced again, nor a holder pinned by the
	// rounds after it (run e4 of 6 December 2026: four rounds of "no client
	// acquired r0").
	r.awaitFenced("counterexample")
	r.mu.Lock()
	k := len(r.cxs)
	r.mu.Unlock()
	b := &cxBuild{r: r, cx: cx, third: 3 - cx.Victim - cx.Blocker, ctx: context.Background(),
		key: redlock.LockKey(KeyPrefix, CounterexampleResource), fenceKey: redlock.FenceKey(KeyPrefix, CounterexampleResource),
		clientA: r.cfg.Clients + 2*k, clientB: r.cfg.Clients + 2*k + 1,
		dummy: fmt.Sprintf("dummy-owner-%d", k)}
	out, err := b.run()
	if out.A != nil && out.B != nil {
		r.mu.Lock()
		r.cxs = append(r.cxs, out)
		r.mu.Unlock()
	}
	if err != nil {
		return out, fmt.Errorf("counterexample %q could not be constructed: %w; steps taken:\n  %s",
			cx.What, err, strings.Join(out.Steps, "\n  "))
	}
	return out, nil
}

// cxBuild is one construction in progress.
type cxBuild struct {
	r                *Run
	cx               Counterexample
	third            int
	ctx              context.Context
	key, fenceKey    string
	clientA, clientB int
	dummy            string
	out              Constructed
}

// step records a step in the result and the timeline.
func (b *cxBuild) step(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	b.out.Steps = append(b.out.Steps, s)
	b.r.Note("counterexample: %s", s)
}

// stateWait bounds each wait for a state of the nodes.
const stateWait = 15 * time.Second

func (b *cxBuild) run() (*Constructed, error) {
	r, cx := b.r, b.cx
	opts := append([]redlock.Option{redlock.WithTTL(r.cfg.TTL), redlock.WithKeyPrefix(KeyPrefix)}, r.cfg.ClientOptions...)
	dial := func(name string) (*redlock.Client, error) {
		c, err := redlock.Dial(r.urls, opts...)
		if err != nil {
			return nil, fmt.Errorf("dial client %s: %w", name, err)
		}
		return c, nil
	}
	ca, err := dial("A")
	if err != nil {
		return &b.out, err
	}
	defer ca.Close()

	// 1. Warm-up: every node gets a fence counter.
	if err := b.warmUp(ca); err != nil {
		return &b.out, err
	}

	// 2. The dummy owner holds the blocker.
	ok, err := redisDo(r.node(cx.Blocker).ProxyAddr(), "SET", b.key, b.dummy, "NX", "PX", (2 * cx.Lease).Milliseconds())
	if err != nil || ok == nil {
		return &b.out, fmt.Errorf("the dummy owner could not take node %d: %v (reply %v)", cx.Blocker, err, ok)
	}
	b.step("a dummy owner holds %s on node %d", CounterexampleResource, cx.Blocker)

	// 3. A acquires exactly the two other nodes, fences and writes.
	la, ga, err := b.acquire(ca, b.clientA, "A", time.Now().Add(stateWait))
	if err != nil {
		return &b.out, err
	}
	b.out.A = ga
	held := b.holders(la.Token())
	b.step("A (grant %d) holds %s until %s: %s", ga.ID, CounterexampleResource, r.rel(ga.Until), held)
	if !b.holdsExactly(la.Token()) {
		return &b.out, fmt.Errorf("A's majority is not exactly nodes %d and %d: %s", cx.Victim, b.third, held)
	}
	token, err := la.Fence(b.ctx)
	if err != nil {
		ga.FenceErr = err
		return &b.out, fmt.Errorf("A could not fence: %w", err)
	}
	ga.Token = token
	if !r.write(la, ga) {
		return &b.out, fmt.Errorf("A's validity ended before its first write (until %s)", r.rel(ga.Until))
	}
	b.step("A fenced (token %d) and wrote: %s", token, acceptance(ga.Writes[len(ga.Writes)-1]))
	defer b.release(la, ga, "A")

	// 4. The fault makes the victim forget A's key.
	started := time.Now()
	b.step("fault on node %d: %s", cx.Victim, cx.What)
	if err := cx.Fault(); err != nil {
		return &b.out, fmt.Errorf("fault on node %d: %w", cx.Victim, err)
	}
	b.step("fault done after %v", time.Since(started).Round(time.Millisecond))
	victim := r.node(cx.Victim).ProxyAddr()
	forgot := func() (bool, string) {
		v, err := redis.String(redisDo(victim, "GET", b.key))
		switch {
		case errors.Is(err, redis.ErrNil):
			return true, "no lock key"
		case err != nil:
			return false, err.Error()
		case v == la.Token():
			return false, "A's key"
		default:
			return false, "another key (" + redlock.Digest(v) + ")"
		}
	}
	if seen, ok := b.await(forgot, ga.Until); !ok {
		return &b.out, fmt.Errorf("node %d did not forget A's key while A was valid: it has %s", cx.Victim, seen)
	}
	counter := "present"
	if n, err := redis.Int(redisDo(victim, "EXISTS", b.fenceKey)); err != nil {
		counter = "unknown: " + err.Error()
	} else if n == 0 {
		counter = "gone"
	}
	b.step("node %d forgot A's key; its fence counter of %s: %s", cx.Victim, CounterexampleResource, counter)

	// 5. The dummy owner frees the blocker.
	if _, err := redisDo(r.node(cx.Blocker).ProxyAddr(), "DEL", b.key); err != nil {
		return &b.out, fmt.Errorf("freeing node %d: %w", cx.Blocker, err)
	}
	b.step("the dummy owner freed node %d", cx.Blocker)

	// 6. B, a client that did not call the victim meanwhile, acquires the
	// victim and the blocker while A is valid.
	cb, err := dial("B")
	if err != nil {
		return &b.out, err
	}
	defer cb.Close()
	lb, gb, err := b.acquire(cb, b.clientB, "B", ga.Until)
	if err != nil {
		return &b.out, fmt.Errorf("%w (A valid until %s)", err, r.rel(ga.Until))
	}
	b.out.B = gb
	b.step("B (grant %d) holds %s while A is valid (%v of A's validity left): %s",
		gb.ID, CounterexampleResource, ga.Until.Sub(gb.Reply).Round(time.Millisecond), b.holders(la.Token(), lb.Token()))
	if !gb.Reply.Before(ga.Until) {
		return &b.out, fmt.Errorf("B was granted only after A's validity ended")
	}
	if token, err := lb.Fence(b.ctx); err != nil {
		gb.FenceErr = err
		b.step("B could not fence: %v", err)
	} else {
		gb.Token = token
		r.write(lb, gb)
		b.step("B fenced (token %d) and wrote: %s", token, acceptance(gb.Writes[len(gb.Writes)-1]))
	}

	// 7. A, still valid, writes again; B, then A, release.
	if r.write(la, ga) {
		b.step("A, still valid, wrote again: %s", acceptance(ga.Writes[len(ga.Writes)-1]))
	} else {
		b.step("A's validity ended before its second write")
	}
	b.release(lb, gb, "B")
	return &b.out, nil
}

// warmUp takes the resource on every node, fences it (every node gets the
// counter), writes and releases, each step once the nodes show its effect.
func (b *cxBuild) warmUp(c *redlock.Client) error {
	r := b.r
	var l *redlock.Lock
	var err error
	deadline := time.Now().Add(stateWait)
	for l == nil {
		ctx, cancel := context.WithTimeout(b.ctx, 2*time.Second)
		l, err = c.TryLock(ctx, CounterexampleResource, redlock.WithLockTTL(b.cx.Lease))
		cancel()
		if err != nil {
			if time.Now().After(deadline) {
				return fmt.Errorf("warm-up: no grant within %v: %w", stateWait, err)
			}
			time.Sleep(2 * time.Millisecond) // as in acquire
		}
	}
	// The grant returns at a majority: fence once the key is on every node,
	// so that every node gets the counter.
	everywhere := func() (bool, string) { return b.on(l.Token()) == 7, b.holders(l.Token()) }
	if seen, ok := b.await(everywhere, time.Now().Add(stateWait)); !ok {
		_ = l.Release(b.ctx)
		return fmt.Errorf("warm-up: the key did not reach every node: %s", seen)
	}
	token, err := l.Fence(b.ctx)
	if err != nil {
		_ = l.Release(b.ctx)
		return fmt.Errorf("warm-up: fence: %w", err)
	}
	if err := l.Release(b.ctx); err != nil {
		return fmt.Errorf("warm-up: release: %w", err)
	}
	gone := func() (bool, string) { return b.on(l.Token()) == 0, b.holders(l.Token()) }
	if seen, ok := b.await(gone, time.Now().Add(stateWait)); !ok {
		return fmt.Errorf("warm-up: the key stayed after the release: %s", seen)
	}
	var missing []int
	for i := range 3 {
		n, err := redis.Int(redisDo(r.node(i).ProxyAddr(), "EXISTS", b.fenceKey))
		if err != nil || n != 1 {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("warm-up: nodes %v lack the fence counter after a fenced grant on every node", missing)
	}
	b.step("warm-up: fenced (token %d) on every node and released", token)
	return nil
}

// acquire retries TryLock until it is granted or until by, and records the
// grant as client index idx.
func (b *cxBuild) acquire(c *redlock.Client, idx int, name string, by time.Time) (*redlock.Lock, *Grant, error) {
	var errs []string
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(b.ctx, 2*time.Second)
		sent := time.Now()
		l, err := c.TryLock(ctx, CounterexampleResource, redlock.WithLockTTL(b.cx.Lease))
		reply := time.Now()
		cancel()
		if err == nil {
			g := b.r.record(&Grant{Client: idx, Resource: CounterexampleResource, Sent: sent, Reply: reply, Until: l.Until()})
			if attempt > 1 {
				b.step("%s was granted at attempt %d; refused before: %s", name, attempt, strings.Join(errs, "; "))
			}
			return l, g, nil
		}
		errs = append(errs, err.Error())
		if len(errs) > 3 {
			errs = errs[1:]
		}
		if time.Now().After(by) {
			return nil, nil, fmt.Errorf("%s was not granted in %d attempts; the last: %s", name, attempt, strings.Join(errs, "; "))
		}
		// Refused: a split vote given up early (contend.go), or the
		// cleanup of such an attempt not landed yet. Retry after a pause
		// that lets it land, and keeps a failing construction from
		// spinning on a shared CPU.
		time.Sleep(2 * time.Millisecond)
	}
}

// release releases l and records it in g.
func (b *cxBuild) release(l *redlock.Lock, g *Grant, name string) {
	if !g.ReleaseStart.IsZero() {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, 2*time.Second)
	defer cancel()
	g.ReleaseStart = time.Now()
	g.ReleaseErr = l.Release(ctx)
	g.ReleaseEnd = time.Now()
	b.step("%s released: %v", name, g.ReleaseErr)
}

// on returns the set (bit i for node i) of the nodes whose lock key holds token.
func (b *cxBuild) on(token string) int {
	set := 0
	for i := range 3 {
		if v, err := redis.String(redisDo(b.r.node(i).ProxyAddr(), "GET", b.key)); err == nil && v == token {
			set |= 1 << i
		}
	}
	return set
}

// holdsExactly reports whether the key holds token on the victim and the
// third node, and the dummy owner's token on the blocker.
func (b *cxBuild) holdsExactly(token string) bool {
	v, err := redis.String(redisDo(b.r.node(b.cx.Blocker).ProxyAddr(), "GET", b.key))
	return b.on(token) == 1<<b.cx.Victim|1<<b.third && err == nil && v == b.dummy
}

// holders describes who holds the lock key on each node: tokens are named
// A and B in that order, others by their digest.
func (b *cxBuild) holders(tokens ...string) string {
	var parts []string
	for i := range 3 {
		v, err := redis.String(redisDo(b.r.node(i).ProxyAddr(), "GET", b.key))
		who := ""
		switch {
		case errors.Is(err, redis.ErrNil):
			who = "free"
		case err != nil:
			who = err.Error()
		case v == b.dummy:
			who = "the dummy owner"
		default:
			who = redlock.Digest(v)
			for j, t := range tokens {
				if v == t {
					who = string(rune('A' + j))
				}
			}
		}
		parts = append(parts, fmt.Sprintf("node %d: %s", i, who))
	}
	return strings.Join(parts, ", ")
}

// await polls cond (the nodes cannot signal it) every 2ms until it holds or
// until by; it returns what cond last saw.
func (b *cxBuild) await(cond func() (bool, string), by time.Time) (string, bool) {
	for {
		ok, seen := cond()
		if ok {
			return seen, true
		}
		if time.Now().After(by) {
			return seen, false
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func acceptance(w Write) string {
	if w.Accepted {
		return "accepted"
	}
	return "refused (" + w.Err.Error() + ")"
}

package scenario

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/faults/harness"
	"github.com/redlock-go/redlock/internal/history"
	"github.com/redlock-go/redlock/node"
)

// ModelCounterexample is the deterministic construction, on a three-node
// cluster without persistence, of what an empty restart (P5 broken: no AOF,
// no quarantine) lets through in a model, as Counterexample is for the lock
// and TestSimModelsBroken is in the simulation. Node 1 is the victim, node 2
// the blocker, node 0 the third node:
//
//  1. a dummy owner takes the model's lock keys on node 2;
//  2. the first holders (a leader; as many permits as the semaphore has; a
//     reader) are granted, each exactly nodes 1 and 0 (checked);
//  3. Fault makes node 1 forget them (checked: it must have forgotten
//     within forgetWait of the fault's return, as an empty restart does at
//     once);
//  4. the dummy owner frees node 2;
//  5. a last client, dialed only now, is granted nodes 1 and 2 while the
//     first ones are valid (checked): a second leader, one permit too many,
//     a writer beside the reader. The checker must see it.
//
// For the election, step 5 is taken twice. First by a client that reaches
// every node: its Campaign is refused (ErrLockLost, "fence counter missing"),
// because node 0 answers with the term's counter that nodes 1 and 2 lack;
// that refusal is expected (P5, docs/election.md) and counted. Then by a
// client cut off from node 0 (its URL for node 0 is a closed port), as the
// simulation's last client is: no node it hears from has a counter, so it
// starts the terms again, and leads with the first leader's term while the
// first leader leads.
type ModelCounterexample struct {
	Model Model
	// Name is the scenario's name in the report line (default
	// "<model>-restart-empty").
	Name    string
	Cluster *harness.Cluster
	// Resource is the election, semaphore or lock (default "cx-<model>").
	Resource string
	// What describes the fault; Fault makes node 1 forget (default: SIGKILL
	// and an immediate start, without persistence).
	What  string
	Fault func() error
	// Lease is the first and last holders' lease (default
	// DefaultCounterexampleLease); whether the steps fell inside it is
	// checked.
	Lease time.Duration
	// Permits is the semaphore's (default 2).
	Permits int
}

// ModelConstructed is what a model's counterexample produced.
type ModelConstructed struct {
	// Holds are the first holders, then the last one.
	Holds []*Hold
	Steps []string
	// Violations is the checker's count, Findings what it found.
	Violations int
	Findings   []string
	// Refused are the Campaigns refused as P5 says they are after an empty
	// restart (the counters seen missing): expected.
	Refused []error
}

const (
	cxVictim, cxBlocker, cxThird = 1, 2, 0
	// forgetWait bounds the wait for the victim to show that it forgot:
	// an empty restart forgets at once.
	forgetWait = 500 * time.Millisecond
)

// modelCx is one construction in progress.
type modelCx struct {
	cx      ModelCounterexample
	origin  time.Time
	urls    []string
	dummy   string
	out     ModelConstructed
	clients []*redlock.Client
	undo    []func() // releases, in reverse order
	nextID  int
}

// Construct builds cx's counterexample and checks it. An error means that
// it could not be built: it says at which step, with the steps taken.
func (cx ModelCounterexample) Construct(tb testing.TB) (*ModelConstructed, error) {
	tb.Helper()
	cx = cx.withDefaults()
	if n := len(cx.Cluster.Nodes()); n != 3 {
		return nil, fmt.Errorf("model counterexample: the cluster has %d nodes, want 3", n)
	}
	b := &modelCx{cx: cx, origin: time.Now(), dummy: "dummy-owner-" + cx.Resource}
	for _, n := range cx.Cluster.Nodes() {
		b.urls = append(b.urls, n.ProxyURL())
	}
	defer b.close()
	var err error
	switch cx.Model {
	case Election:
		err = b.election()
	case Semaphore:
		err = b.semaphore()
	case RWLock:
		err = b.rwlock()
	default:
		err = fmt.Errorf("unknown model %q", cx.Model)
	}
	b.releaseAll()
	if err != nil {
		return &b.out, fmt.Errorf("%s counterexample (%s) could not be constructed: %w; steps taken:\n  %s",
			cx.Model, cx.What, err, strings.Join(b.out.Steps, "\n  "))
	}
	b.check()
	return &b.out, nil
}

func (cx ModelCounterexample) withDefaults() ModelCounterexample {
	if cx.Name == "" {
		cx.Name = string(cx.Model) + "-restart-empty"
	}
	if cx.Resource == "" {
		cx.Resource = "cx-" + string(cx.Model)
	}
	if cx.Lease == 0 {
		cx.Lease = DefaultCounterexampleLease
	}
	if cx.Permits == 0 {
		cx.Permits = 2
	}
	if cx.Fault == nil {
		victim := cx.Cluster.Node(cxVictim)
		cx.What = "SIGKILL and immediate start, empty"
		cx.Fault = func() error {
			if err := victim.Kill(); err != nil {
				return err
			}
			return victim.Start()
		}
	}
	return cx
}

// Demonstrate constructs cx's counterexample, checks it, prints the
// scenario line and fails the test, with the steps and what the checker
// saw, unless it was built and the checker found the violation.
func Demonstrate(tb testing.TB, cx ModelCounterexample) *ModelConstructed {
	tb.Helper()
	cx = cx.withDefaults()
	start := time.Now()
	out, err := cx.Construct(tb)
	if out == nil {
		out = &ModelConstructed{}
	}
	report(fmt.Sprintf("fault scenario=%s acquisitions=%d violations=%d preconditions=%s refused_expected=%d duration_ms=%d",
		cx.Name, len(out.Holds), out.Violations, Broken, len(out.Refused), time.Since(start).Milliseconds()))
	if err != nil {
		tb.Errorf("%s: %v", cx.Name, err)
		return out
	}
	tb.Logf("%s: constructed in %v; the checker found %d violations:\n  %s\nsteps:\n  %s", cx.Name,
		time.Since(start).Round(time.Millisecond), out.Violations, strings.Join(out.Findings, "\n  "), strings.Join(out.Steps, "\n  "))
	if out.Violations == 0 {
		tb.Errorf("%s: constructed, but the checker found no violation; steps:\n  %s\ntimeline:\n%s", cx.Name,
			strings.Join(out.Steps, "\n  "), Timeline(start, start, time.Hour, "", timelineGrants(out.Holds), nil, nil, 0))
	}
	return out
}

func (b *modelCx) step(format string, args ...any) {
	b.out.Steps = append(b.out.Steps, fmt.Sprintf("%s %s", b.rel(time.Now()), fmt.Sprintf(format, args...)))
}

func (b *modelCx) rel(t time.Time) string {
	return fmt.Sprintf("%+.3fms", float64(t.Sub(b.origin).Microseconds())/1000)
}

func (b *modelCx) addr(i int) string { return b.cx.Cluster.Node(i).ProxyAddr() }

// dial dials a client of the given node URLs.
func (b *modelCx) dial(urls []string) (*redlock.Client, error) {
	c, err := redlock.Dial(urls, redlock.WithKeyPrefix(KeyPrefix))
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	b.clients = append(b.clients, c)
	return c, nil
}

// cutOff returns the node URLs with node 0's replaced by a closed port: a
// client of them is cut off from node 0, and from it only.
func (b *modelCx) cutOff() ([]string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		return nil, err
	}
	urls := append([]string(nil), b.urls...)
	urls[cxThird] = "redis://" + addr
	return urls, nil
}

func (b *modelCx) close() {
	for _, c := range b.clients {
		_ = c.Close()
	}
}

// hold records a hold granted at [sent, reply], released by release.
func (b *modelCx) hold(g *Hold, sent, reply time.Time, release func(context.Context) error) *Hold {
	b.nextID++
	g.ID, g.Client, g.Name, g.Sent, g.Reply = b.nextID, b.nextID-1, b.cx.Resource, sent, reply
	b.out.Holds = append(b.out.Holds, g)
	b.undo = append(b.undo, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		g.ReleaseStart = time.Now()
		g.ReleaseErr = release(ctx)
		g.ReleaseEnd = time.Now()
		b.step("hold %d released: %v", g.ID, g.ReleaseErr)
	})
	return g
}

// releaseAll releases the holds, the last first.
func (b *modelCx) releaseAll() {
	for i := len(b.undo) - 1; i >= 0; i-- {
		b.undo[i]()
	}
	b.undo = nil
}

// block has the dummy owner take keys on the blocker.
func (b *modelCx) block(keys []string) error {
	for _, k := range keys {
		ok, err := redisDo(b.addr(cxBlocker), "SET", k, b.dummy, "NX", "PX", (2 * b.cx.Lease).Milliseconds())
		if err != nil || ok == nil {
			return fmt.Errorf("the dummy owner could not take %s on node %d: %v (reply %v)", k, cxBlocker, err, ok)
		}
	}
	b.step("a dummy owner holds %s's keys on node %d", b.cx.Resource, cxBlocker)
	b.undo = append(b.undo, func() { _ = b.free(keys) }) // if the construction stops before step 4
	return nil
}

// free has the dummy owner free keys on the blocker.
func (b *modelCx) free(keys []string) error {
	for _, k := range keys {
		if _, err := redisDo(b.addr(cxBlocker), "EVAL",
			"if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0", 1, k, b.dummy); err != nil {
			return fmt.Errorf("freeing %s on node %d: %w", k, cxBlocker, err)
		}
	}
	return nil
}

// placed checks that h holds exactly nodes 1 and 0.
func (b *modelCx) placed(g *Hold, h *handle) error {
	okV, seenV := h.on(b.addr(cxVictim))
	okT, seenT := h.on(b.addr(cxThird))
	okB, seenB := h.on(b.addr(cxBlocker))
	where := fmt.Sprintf("node %d: %s, node %d: %s, node %d: %s", cxThird, seenT, cxVictim, seenV, cxBlocker, seenB)
	if !okV || !okT || okB {
		return fmt.Errorf("hold %d does not hold exactly nodes %d and %d: %s", g.ID, cxVictim, cxThird, where)
	}
	b.step("hold %d (%s%s) holds until %s: %s", g.ID, g.Kind, holdDetail(g), b.rel(g.Until), where)
	return nil
}

func holdDetail(g *Hold) string {
	switch g.Kind {
	case KindLeader:
		return fmt.Sprintf(", term %d", g.Term)
	case KindPermit:
		return fmt.Sprintf(", slot %d", g.Slot)
	}
	return ""
}

// fault runs the fault and checks that the victim forgot the first
// holders: on(victim) false for each handle.
func (b *modelCx) fault(holds []*Hold, hs []*handle) error {
	b.step("fault on node %d: %s", cxVictim, b.cx.What)
	start := time.Now()
	if err := b.cx.Fault(); err != nil {
		return fmt.Errorf("fault on node %d: %w", cxVictim, err)
	}
	b.step("fault done after %v", time.Since(start).Round(time.Millisecond))
	by := time.Now().Add(forgetWait)
	for {
		var kept []string
		for i, h := range hs {
			if ok, seen := h.on(b.addr(cxVictim)); ok {
				kept = append(kept, fmt.Sprintf("hold %d: %s", holds[i].ID, seen))
			}
		}
		if len(kept) == 0 {
			b.step("node %d forgot the first holders", cxVictim)
			return nil
		}
		if time.Now().After(by) {
			return fmt.Errorf("node %d did not forget the first holders within %v of the fault: %s", cxVictim, forgetWait, strings.Join(kept, "; "))
		}
		time.Sleep(2 * time.Millisecond) // the node cannot signal it
	}
}

// retry calls try until it succeeds or until by, pausing 2ms between
// attempts (a refusal from a split vote, or from a cleanup not landed yet,
// passes).
func retry[T any](b *modelCx, what string, by time.Time, try func(context.Context) (T, error)) (T, time.Time, time.Time, error) {
	var errs []string
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		sent := time.Now()
		v, err := try(ctx)
		reply := time.Now()
		cancel()
		if err == nil {
			if attempt > 1 {
				b.step("%s granted at attempt %d; refused before: %s", what, attempt, strings.Join(errs, "; "))
			}
			return v, sent, reply, nil
		}
		errs = append(errs, err.Error())
		if len(errs) > 3 {
			errs = errs[1:]
		}
		if time.Now().After(by) {
			return v, sent, reply, fmt.Errorf("%s not granted in %d attempts; the last: %s", what, attempt, strings.Join(errs, "; "))
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// lastWithinFirst checks that the last hold was granted while every first
// hold was valid.
func (b *modelCx) lastWithinFirst(last *Hold) error {
	for _, g := range b.out.Holds {
		if g != last && !last.Reply.Before(g.Until) {
			return fmt.Errorf("hold %d was granted only after hold %d's validity ended (%s)", last.ID, g.ID, b.rel(g.Until))
		}
	}
	b.step("hold %d (%s%s) granted while every first holder is valid: %s", last.ID, last.Kind, holdDetail(last), b.where(last))
	return nil
}

// where describes the model's lock key on every node.
func (b *modelCx) where(g *Hold) string {
	key := redlock.LockKey(KeyPrefix, b.cx.Resource)
	if g.Kind == KindPermit {
		key = redlock.LockKey(KeyPrefix, redlock.SemaphoreSlot(b.cx.Resource, g.Slot))
	}
	var parts []string
	for i := range 3 {
		_, seen := describe(b.addr(i), key)
		parts = append(parts, fmt.Sprintf("node %d: %s", i, seen))
	}
	return "lock key " + strings.Join(parts, ", ")
}

func (b *modelCx) election() error {
	cx := b.cx
	key := redlock.LockKey(KeyPrefix, cx.Resource)
	fenceKey := redlock.FenceKey(KeyPrefix, cx.Resource)
	if err := b.block([]string{key}); err != nil {
		return err
	}
	ca, err := b.dial(b.urls)
	if err != nil {
		return err
	}
	ld, sent, reply, err := retry(b, "the first leader", time.Now().Add(stateWait), func(ctx context.Context) (*redlock.Leadership, error) {
		return ca.Campaign(ctx, cx.Resource, "A", redlock.WithLockTTL(cx.Lease))
	})
	if err != nil {
		return err
	}
	ha := leaderHandle(ld)
	a := b.hold(&Hold{Kind: KindLeader, Term: ld.Term(), Until: ld.Until()}, sent, reply, ld.Resign)
	if err := b.placed(a, ha); err != nil {
		return err
	}
	var counters []string
	for i := range 3 {
		n, err := redis.Int(redisDo(b.addr(i), "EXISTS", fenceKey))
		if err != nil {
			return fmt.Errorf("reading node %d's fence counter: %w", i, err)
		}
		if (n == 1) != (i != cxBlocker) {
			return fmt.Errorf("the term's counter is on node %d: %v (the construction needs it on nodes %d and %d only)", i, n == 1, cxThird, cxVictim)
		}
		counters = append(counters, fmt.Sprintf("node %d: %v", i, n == 1))
	}
	b.step("the term's fence counter: %s", strings.Join(counters, ", "))

	if err := b.fault([]*Hold{a}, []*handle{ha}); err != nil {
		return err
	}
	if n, err := redis.Int(redisDo(b.addr(cxVictim), "EXISTS", fenceKey)); err != nil || n != 0 {
		return fmt.Errorf("node %d kept the term's counter (%v, %v): it was not wiped", cxVictim, n, err)
	}
	if err := b.free([]string{key}); err != nil {
		return err
	}
	b.step("the dummy owner freed node %d", cxBlocker)

	// A candidate that hears from every node: refused, as P5 says.
	cc, err := b.dial(b.urls)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	ldc, err := cc.Campaign(ctx, cx.Resource, "C", redlock.WithLockTTL(cx.Lease))
	cancel()
	switch {
	case err == nil:
		c := b.hold(&Hold{Kind: KindLeader, Term: ldc.Term(), Until: ldc.Until()}, time.Now(), time.Now(), ldc.Resign)
		return fmt.Errorf("a Campaign that reaches every node was elected (hold %d, term %d) after the empty restart: it should be refused, node %d having the counter that nodes %d and %d lost or never had (P5, docs/election.md)",
			c.ID, c.Term, cxThird, cxVictim, cxBlocker)
	case !errors.Is(err, redlock.ErrLockLost) || !strings.Contains(err.Error(), "fence counter missing"):
		return fmt.Errorf("a Campaign that reaches every node failed, but not on the lost counters as P5 says: %w", err)
	}
	b.out.Refused = append(b.out.Refused, err)
	b.step("a candidate that reaches every node is refused, as expected after an empty restart (P5): %v", err)

	// A candidate cut off from node 0: leads with the first leader's term.
	urls, err := b.cutOff()
	if err != nil {
		return err
	}
	cd, err := b.dial(urls)
	if err != nil {
		return err
	}
	ldd, sent, reply, err := retry(b, "the candidate cut off from node 0", a.Until, func(ctx context.Context) (*redlock.Leadership, error) {
		return cd.Campaign(ctx, cx.Resource, "D", redlock.WithLockTTL(cx.Lease))
	})
	if err != nil {
		return fmt.Errorf("%w (the first leader valid until %s)", err, b.rel(a.Until))
	}
	d := b.hold(&Hold{Kind: KindLeader, Term: ldd.Term(), Until: ldd.Until()}, sent, reply, ldd.Resign)
	return b.lastWithinFirst(d)
}

func (b *modelCx) semaphore() error {
	cx := b.cx
	ops := semaphoreOps{permits: cx.Permits}
	if err := b.block(ops.keys(cx.Resource)); err != nil {
		return err
	}
	acquire := func(what string, by time.Time) (*Hold, *handle, error) {
		c, err := b.dial(b.urls)
		if err != nil {
			return nil, nil, err
		}
		sem, err := c.Semaphore(cx.Resource, cx.Permits)
		if err != nil {
			return nil, nil, err
		}
		p, sent, reply, err := retry(b, what, by, func(ctx context.Context) (*redlock.Permit, error) {
			return sem.TryAcquire(ctx, redlock.WithPermitTTL(cx.Lease))
		})
		if err != nil {
			return nil, nil, err
		}
		key := redlock.LockKey(KeyPrefix, redlock.SemaphoreSlot(cx.Resource, p.Slot()))
		h := &handle{until: p.Until, release: p.Release, on: func(addr string) (bool, string) {
			v, seen := describe(addr, key)
			return v != "" && !strings.HasPrefix(v, "dummy-owner"), fmt.Sprintf("slot %d: %s", p.Slot(), seen)
		}}
		return b.hold(&Hold{Kind: KindPermit, Slot: p.Slot(), Until: p.Until()}, sent, reply, p.Release), h, nil
	}
	var first []*Hold
	var hs []*handle
	for i := range cx.Permits {
		g, h, err := acquire(fmt.Sprintf("permit %d", i+1), time.Now().Add(stateWait))
		if err != nil {
			return err
		}
		if err := b.placed(g, h); err != nil {
			return err
		}
		first, hs = append(first, g), append(hs, h)
	}
	if err := b.fault(first, hs); err != nil {
		return err
	}
	if err := b.free(ops.keys(cx.Resource)); err != nil {
		return err
	}
	b.step("the dummy owner freed node %d", cxBlocker)
	by := first[0].Until
	for _, g := range first {
		if g.Until.Before(by) {
			by = g.Until
		}
	}
	last, _, err := acquire(fmt.Sprintf("permit %d", cx.Permits+1), by)
	if err != nil {
		return err
	}
	return b.lastWithinFirst(last)
}

func (b *modelCx) rwlock() error {
	cx := b.cx
	key := redlock.LockKey(KeyPrefix, cx.Resource)
	if err := b.block([]string{key}); err != nil {
		return err
	}
	cr, err := b.dial(b.urls)
	if err != nil {
		return err
	}
	rl, sent, reply, err := retry(b, "the reader", time.Now().Add(stateWait), func(ctx context.Context) (*redlock.ReadLock, error) {
		return cr.TryRLock(ctx, cx.Resource, redlock.WithLockTTL(cx.Lease))
	})
	if err != nil {
		return err
	}
	hr := readHandle(rl)
	r := b.hold(&Hold{Kind: KindRead, Until: rl.Until()}, sent, reply, rl.Release)
	if err := b.placed(r, hr); err != nil {
		return err
	}
	if err := b.fault([]*Hold{r}, []*handle{hr}); err != nil {
		return err
	}
	readers, _ := node.ReaderKeys(key)
	if n, err := redis.Int(redisDo(b.addr(cxVictim), "EXISTS", readers)); err != nil || n != 0 {
		return fmt.Errorf("node %d kept the readers' set (%v, %v): it was not wiped", cxVictim, n, err)
	}
	if err := b.free([]string{key}); err != nil {
		return err
	}
	b.step("the dummy owner freed node %d", cxBlocker)
	cw, err := b.dial(b.urls)
	if err != nil {
		return err
	}
	l, sent, reply, err := retry(b, "the writer", r.Until, func(ctx context.Context) (*redlock.Lock, error) {
		return cw.TryWLock(ctx, cx.Resource, redlock.WithLockTTL(cx.Lease))
	})
	if err != nil {
		return fmt.Errorf("%w (the reader valid until %s)", err, b.rel(r.Until))
	}
	w := b.hold(&Hold{Kind: KindWrite, Until: l.Until()}, sent, reply, l.Release)
	return b.lastWithinFirst(w)
}

// check runs the model's checker on the holds (released by now).
func (b *modelCx) check() {
	hs := b.out.Holds
	in := make([]*history.Grant, len(hs))
	for i, g := range hs {
		in[i] = g.history()
	}
	var v modelVerdict
	switch b.cx.Model {
	case Election:
		rep := history.CheckElection(in)
		v.violations = rep.Violations()
		for _, o := range rep.Overlaps {
			v.findings = append(v.findings, finding{text: fmt.Sprintf("two leaders at once for %v: hold %d (term %d) and hold %d (term %d)",
				o.To.Sub(o.From).Round(time.Millisecond), hs[o.A].ID, hs[o.A].Term, hs[o.B].ID, hs[o.B].Term)})
		}
		for _, t := range rep.TermOrder {
			v.findings = append(v.findings, finding{text: fmt.Sprintf("the term did not increase: hold %d (term %d) took over after hold %d (term %d)",
				hs[t.B].ID, hs[t.B].Term, hs[t.A].ID, hs[t.A].Term)})
		}
		for _, t := range rep.SameTerm {
			v.findings = append(v.findings, finding{text: fmt.Sprintf("one term, two leaders: holds %d and %d, term %d", hs[t.A].ID, hs[t.B].ID, hs[t.A].Term)})
		}
	case Semaphore:
		v = checkPermits(hs, b.cx.Permits)
	case RWLock:
		v = checkRW(hs)
	}
	b.out.Violations = v.violations
	for _, f := range v.findings {
		b.out.Findings = append(b.out.Findings, f.text)
	}
}

package scenario

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/faults/harness"
	"github.com/redlock-go/redlock/internal/history"
	"github.com/redlock-go/redlock/node"
)

// The models built on the lock (issue 27) under faults: leader election
// (Client.Campaign), the counting semaphore (Client.Semaphore) and the
// read-write lock (RLock, WLock), each driven by separate clients and judged
// by internal/history's model checkers (CheckElection, CheckSemaphore,
// CheckRW), the ones the simulation uses. docs/testing.md §2.7.

// Model names a model driven by a ModelRun.
type Model string

// The models.
const (
	Election  Model = "election"
	Semaphore Model = "semaphore"
	RWLock    Model = "rwlock"
)

// The kinds of hold.
const (
	KindLeader = "leader"
	KindPermit = "permit"
	KindRead   = "read"
	KindWrite  = "write"
)

// ModelConfig describes one run of a model's workload.
type ModelConfig struct {
	// Name is the scenario's name in the report line.
	Name  string
	Model Model
	// Cluster holds three nodes; the clients reach them through their proxies.
	Cluster *harness.Cluster
	// Clients is the number of clients (default 4), each a redlock.Client of
	// its own: candidates of the elections, users of the semaphores, readers
	// and writers of the locks.
	Clients int
	// Names are the elections, semaphores or locks (default "m0", "m1"); the
	// phases pin holds of the first.
	Names []string
	// TTL is the lease of ordinary holds (default 500ms).
	TTL time.Duration
	// PinTTL is the lease of the attempts made on the first name while a
	// phase waits for its pinned holds (default 6s, ModelPhase.PinTTL for
	// one phase): long enough for the fault (a restart takes 1.3–2.7 s on
	// a loaded machine here) and the competitors' refusals to fall inside
	// it (checked), without costing time, since the injector releases the
	// pinned holds as soon as it has seen what it waits for.
	PinTTL time.Duration
	// MaxHold bounds the random time an ordinary holder holds (default 2ms).
	MaxHold time.Duration
	// Permits is the semaphores' number of permits (default 2).
	Permits int
	// MinHolds is the least number of holds the run must see (default 150).
	MinHolds int
	// MaxDuration bounds the workload (default 1 minute).
	MaxDuration time.Duration
	// ClientOptions are added to every client's options (after
	// WithBreaker(0): every attempt asks every node, the victim included).
	ClientOptions []redlock.Option
}

// Hold is one hold of a model: a leadership, a permit, a read or a write
// lock, with the times of this process' clock.
type Hold struct {
	// ID numbers the holds in the order they were granted, from 1.
	ID     int
	Client int
	// Name is the election, semaphore or lock.
	Name string
	Kind string
	// Slot is a permit's slot.
	Slot int
	// Term is a leader's term, or a writer's fencing token (0: none).
	Term     uint64
	FenceErr error
	// Sent is when the call that granted it was made (Campaign,
	// TryAcquire, Acquire, RLock, WLock and their Try forms), Reply when it
	// returned.
	Sent, Reply time.Time
	// Until is the validity end as the holder knew it last (a leader's, as
	// last renewed).
	Until time.Time
	// Lost is the cause of a leadership that ended by itself (its context
	// ended before Resign).
	Lost error
	// Pinned names the phase that pinned it ("" if none).
	Pinned                   string
	ReleaseStart, ReleaseEnd time.Time
	ReleaseErr               error
}

// End is the end of the hold: the earlier of Until and the release.
func (g *Hold) End() time.Time {
	if !g.ReleaseStart.IsZero() && g.ReleaseStart.Before(g.Until) {
		return g.ReleaseStart
	}
	return g.Until
}

// history returns g as the checkers see it: from the reply (a request sent
// while another held is legitimately granted once that one's release has
// landed: check.go) to the validity end or the release.
func (g *Hold) history() *history.Grant {
	return &history.Grant{Client: g.Client, Resource: g.Name, Started: g.Sent, Acquired: g.Reply,
		Until: g.Until, Released: g.ReleaseStart, Token: g.Term, Read: g.Kind == KindRead}
}

// handle is a hold in progress, as its client holds it.
type handle struct {
	until   func() time.Time
	done    <-chan struct{} // a leadership's end; nil for the others
	lost    func() error    // a leadership's cause, once done
	release func(context.Context) error
	// on reports whether the hold is on the node at addr, and what the node
	// has instead if not.
	on func(addr string) (bool, string)
	// then, if set, runs once the grant is recorded (a writer's Fence: the
	// hold starts when the lock call returned, not after the fence).
	then func(context.Context, *Hold)
	// renew extends the lease (a leader proclaims its value again: its
	// lease is renewed in the background).
	renew func(context.Context) error
}

// modelOps is what differs between the models.
type modelOps interface {
	// kind picks the kind of the next attempt (pinKind: that of a pending
	// pin on the name, or one that conflicts with the pinned holds while a
	// phase waits for refusals; "" if none).
	kind(pinKind string) string
	// try makes one attempt for client i.
	try(ctx context.Context, r *ModelRun, i int, name, kind string, ttl time.Duration) (*handle, *Hold, error)
	// keys are the lock keys that the blocker takes on one node.
	keys(name string) []string
	// pins is the number of holds a phase pins.
	pins() int
	// refusal reports whether a refused attempt of kind counts against a
	// pinned hold of pinKind (it conflicts with it).
	refusal(pinKind, kind string) bool
	// ready waits until a phase can start on name.
	ready(r *ModelRun, name string, by time.Time) error
	// check judges the holds.
	check(r *ModelRun, holds []*Hold) modelVerdict
}

// modelVerdict is a checker's verdict.
type modelVerdict struct {
	violations int
	// findings describe the violations, each with the holds involved.
	findings []finding
	// extra are the model's figures for the report line ("terms=…").
	extra string
	// problems are failures other than violations (a run that did not
	// contend).
	problems []string
}

type finding struct {
	text  string
	holds []int // indexes into the holds
	at    time.Time
}

// modelPin is the injector's request for the next holds of a name.
type modelPin struct {
	phase   string
	name    string
	kind    string    // "" any
	since   time.Time // only holds whose call was made after it
	want    int
	ttl     time.Duration // the lease of the attempts while it is pending
	renew   bool          // the pinned holders renew once before they release
	got     []*pinnedHold
	full    chan struct{} // closed once want holds are pinned
	release chan struct{} // closed by the injector: the pinned holders release
}

// pinnedHold is a pinned hold, as the injector sees it.
type pinnedHold struct {
	id     int
	client int
	kind   string
	slot   int
	term   uint64
	until  time.Time // at the grant
	h      *handle
	onV    string        // what the victim had for it before the fault
	ended  chan struct{} // closed once its holder has returned from the release
	hold   *Hold         // read only once ended is closed
	reason string        // why it ended; set before ended is closed
}

// phaseWatch counts what the clients saw during a phase.
type phaseWatch struct {
	name    string
	pinKind string
	faultAt time.Time
	since   time.Time // refusals and shares count from here (zero: not yet)
	// refused: attempts on name sent since since, refused, that conflict
	// with the pinned holds; shared: read locks of name granted since
	// since beside a pinned read lock; other: holds of other names granted
	// since the fault.
	refused, shared, other int
}

// ModelRun is a model's workload in progress.
type ModelRun struct {
	tb      testing.TB
	cfg     ModelConfig
	ops     modelOps
	origin  time.Time
	urls    []string
	clients []*redlock.Client
	stop    chan struct{}
	wg      sync.WaitGroup

	holdCount atomic.Int64
	enough    chan struct{}
	attempts  atomic.Int64
	// fenceRefusals: Campaign refused because too few nodes that granted
	// have the term's counter (expected after an empty restart: P5).
	fenceRefusals atomic.Int64
	// waited: grants by a waiting call (Acquire, RLock, WLock) of the
	// semaphore and read-write models.
	waited      atomic.Int64
	renewOK     atomic.Int64
	renewFailed atomic.Int64
	poke        chan struct{}

	mu     sync.Mutex
	holds  []*Hold
	notes  []Note
	pin    *modelPin
	watch  *phaseWatch
	phases []PhaseResult
	sems   []map[string]*redlock.Semaphore // by client
	steps  []clockStep
}

// clockStep is a step of this host's wall clock against its monotonic
// clock: the nodes, containers on this host, expire keys by the wall clock,
// while the clients measure validity by the monotonic one (P2). A step
// forward of more than what is left of a lease expires it early on every
// node at once, which no client can notice: two holders at once, with no
// fault of the library. Seen once here, as the nodes' logs tell it: a
// sandbox VM whose wall clock stepped by about 4 s during a run
// (docs/testing.md §2.7).
type clockStep struct {
	After time.Time // the watch's previous sample: the step came after it
	At    time.Time // the sample that saw it
	By    time.Duration
}

// allAfterStep says whether v has violations and every one of them began
// after the first of steps (none when there were no steps).
func allAfterStep(steps []clockStep, v modelVerdict) bool {
	if len(steps) == 0 || v.violations == 0 || len(v.findings) == 0 {
		return false
	}
	for _, f := range v.findings {
		if f.at.IsZero() || f.at.Before(steps[0].After) {
			return false
		}
	}
	return true
}

// stepThreshold is the least wall-clock step recorded: the steps of a VM
// paused by its host are seconds; a sampling delay moves both clocks alike.
const stepThreshold = 10 * time.Millisecond

// watchClock records the wall clock's steps until the run stops.
func (r *ModelRun) watchClock() {
	defer r.wg.Done()
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	prev := time.Now()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		now := time.Now()
		if by := now.Round(0).Sub(prev.Round(0)) - now.Sub(prev); by > stepThreshold || by < -stepThreshold {
			r.mu.Lock()
			r.steps = append(r.steps, clockStep{After: prev, At: now, By: by})
			r.mu.Unlock()
			r.Note("this host's wall clock stepped by %v against the monotonic clock (P2: the nodes expire keys by it)", by)
		}
		prev = now
	}
}

// PhaseResult is what a phase saw.
type PhaseResult struct {
	What            string
	Victim, Blocker int
	Pinned          []int
	// Refused counts the competitors' attempts refused while the pinned
	// holds held, Shared the read locks granted beside a pinned read lock,
	// During the holds of the other names granted during the fault.
	Refused, Shared, During int
	// Took is how long the fault took to inject.
	Took time.Duration
	// Ended says how the pinned holds ended.
	Ended []string
	// Start and End bracket the phase, from the run's start; Holds is the
	// run's number of holds at its end.
	Start, End time.Duration
	Holds      int
}

// StartModel dials the clients and starts the workload of cfg.Model.
func StartModel(tb testing.TB, cfg ModelConfig) *ModelRun {
	tb.Helper()
	if cfg.Clients == 0 {
		cfg.Clients = 4
	}
	if len(cfg.Names) == 0 {
		cfg.Names = []string{"m0", "m1"}
	}
	if cfg.TTL == 0 {
		cfg.TTL = 500 * time.Millisecond
	}
	if cfg.PinTTL == 0 {
		cfg.PinTTL = 6 * time.Second
	}
	if cfg.MaxHold == 0 {
		cfg.MaxHold = 2 * time.Millisecond
	}
	if cfg.Permits == 0 {
		cfg.Permits = 2
	}
	if cfg.MinHolds == 0 {
		cfg.MinHolds = 150
	}
	if cfg.MaxDuration == 0 {
		cfg.MaxDuration = time.Minute
	}
	r := &ModelRun{tb: tb, cfg: cfg, origin: time.Now(), stop: make(chan struct{}), enough: make(chan struct{}),
		poke: make(chan struct{}, 1)}
	switch cfg.Model {
	case Election:
		r.ops = electionOps{}
	case Semaphore:
		r.ops = semaphoreOps{permits: cfg.Permits}
	case RWLock:
		r.ops = rwOps{}
	default:
		tb.Fatalf("scenario %s: unknown model %q", cfg.Name, cfg.Model)
	}
	for _, n := range cfg.Cluster.Nodes() {
		r.urls = append(r.urls, n.ProxyURL())
	}
	hooks := redlock.Hooks{OnExtend: func(e redlock.ExtendEvent) {
		if e.OK {
			r.renewOK.Add(1)
		} else {
			r.renewFailed.Add(1)
		}
	}}
	opts := append([]redlock.Option{redlock.WithTTL(cfg.TTL), redlock.WithKeyPrefix(KeyPrefix),
		redlock.WithBreaker(0), redlock.WithHooks(hooks)}, cfg.ClientOptions...)
	for i := 0; i < cfg.Clients; i++ {
		c, err := redlock.Dial(r.urls, opts...)
		if err != nil {
			tb.Fatalf("scenario %s: dial client %d: %v", cfg.Name, i, err)
		}
		r.clients = append(r.clients, c)
		r.sems = append(r.sems, map[string]*redlock.Semaphore{})
	}
	tb.Cleanup(r.halt)
	r.wg.Add(1)
	go r.watchClock()
	for i := range r.clients {
		r.wg.Add(1)
		go r.client(i)
	}
	return r
}

// Note records an injector event in the timeline.
func (r *ModelRun) Note(format string, args ...any) {
	r.mu.Lock()
	r.notes = append(r.notes, Note{At: time.Now(), Text: fmt.Sprintf(format, args...)})
	r.mu.Unlock()
}

// Holds returns the number of holds so far.
func (r *ModelRun) Holds() int { return int(r.holdCount.Load()) }

func (r *ModelRun) stopped() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

func (r *ModelRun) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.stop:
		return false
	}
}

// client is one client's loop: pick a name (and, for a read-write lock, a
// kind), try for a while, hold briefly (or, pinned, until the injector
// says), release.
func (r *ModelRun) client(i int) {
	defer r.wg.Done()
	for !r.stopped() {
		name := r.cfg.Names[mrand.IntN(len(r.cfg.Names))]
		// While a phase waits for refusals, three attempts in four
		// contend for its pinned holds' name.
		if w, _ := r.watching(); w != "" && mrand.IntN(2) == 0 {
			name = w
		}
		r.acquire(i, name)
	}
}

// watching returns the name of the phase waiting for refusals, and the kind
// of its pinned holds ("" if none).
func (r *ModelRun) watching() (name, pinKind string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w := r.watch; w != nil && !w.since.IsZero() {
		return w.name, w.pinKind
	}
	return "", ""
}

// pending returns the pin pending on name, if any.
// readPinning reports whether a phase pins (or is about to pin) a read lock
// of name.
func (r *ModelRun) readPinning(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pin != nil && r.pin.name == name && r.pin.kind == KindRead
}

func (r *ModelRun) pending(name string) *modelPin {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.pin; p != nil && p.name == name && len(p.got) < p.want {
		return p
	}
	return nil
}

// acquire retries name for up to the attempt window, and holds what it got.
func (r *ModelRun) acquire(i int, name string) {
	window := min(r.cfg.TTL/2, 250*time.Millisecond)
	deadline := time.Now().Add(window)
	for !r.stopped() {
		ttl, pk := r.cfg.TTL, ""
		p := r.pending(name)
		if p != nil {
			ttl, pk = p.ttl, p.kind
		}
		if w, wk := r.watching(); w == name && p == nil {
			pk = conflicting(wk)
		}
		kind := r.ops.kind(pk)
		// A Campaign waits for the election within its context: one call
		// per window. The other calls are one attempt each.
		limit := 2 * time.Second
		if r.cfg.Model == Election {
			limit = window
		}
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		tried := make(chan struct{})
		if p != nil {
			// Once the pin is full, an attempt with the pinned lease is
			// cut short: a Campaign retrying with it, or a request sent
			// to a node the fault then freezes, would leave that lease's
			// key behind (P4), keeping the next phase's pinned holds off
			// that node for as long.
			go func() {
				select {
				case <-p.full:
					cancel()
				case <-tried:
				}
			}()
		}
		sent := time.Now()
		h, g, err := r.ops.try(ctx, r, i, name, kind, ttl)
		reply := time.Now()
		close(tried)
		cancel()
		r.attempts.Add(1)
		r.observe(name, kind, sent, reply, err == nil)
		if err == nil {
			g.Client, g.Name, g.Sent, g.Reply = i, name, sent, reply
			if h.then != nil {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				h.then(ctx, g)
				cancel()
			}
			r.record(g)
			r.hold(h, g, p)
			return
		}
		if r.cfg.Model == Election && errors.Is(err, redlock.ErrLockLost) {
			r.fenceRefusals.Add(1)
		}
		if errors.Is(err, redlock.ErrClosed) || time.Now().After(deadline) {
			return
		}
		if !r.sleep(time.Duration(500+mrand.IntN(2500)) * time.Microsecond) {
			return
		}
	}
}

// observe counts an attempt for the phase in progress.
func (r *ModelRun) observe(name, kind string, sent, reply time.Time, ok bool) {
	r.mu.Lock()
	if w := r.watch; w != nil {
		switch {
		case name != w.name:
			if ok && !reply.Before(w.faultAt) {
				w.other++
			}
		case w.since.IsZero() || sent.Before(w.since):
		case !ok && r.ops.refusal(w.pinKind, kind):
			w.refused++
		case ok && w.pinKind == KindRead && kind == KindRead:
			w.shared++
		}
	}
	r.mu.Unlock()
	select {
	case r.poke <- struct{}{}:
	default:
	}
}

func (r *ModelRun) record(g *Hold) {
	r.mu.Lock()
	r.holds = append(r.holds, g)
	g.ID = len(r.holds)
	r.mu.Unlock()
	if r.holdCount.Add(1) == int64(r.cfg.MinHolds) {
		close(r.enough)
	}
}

// hold holds h: pinned, until the injector releases it (or, for a leader,
// until the leadership ends by itself; for the others, until its validity
// ends); otherwise for up to MaxHold. Then it releases it. made is the pin
// pending when the call that granted it was made (nil: none).
func (r *ModelRun) hold(h *handle, g *Hold, made *modelPin) {
	p := r.takePin(h, g, made)
	var reason string
	if p != nil {
		t := time.NewTimer(time.Until(h.until()))
		select {
		case <-p.pin.release:
			reason = "released by the injector"
			if p.pin.renew {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				err := h.renew(ctx)
				cancel()
				reason = fmt.Sprintf("renewed (%v), then released by the injector", errOr(err, "ok"))
			}
		case <-h.done:
			reason = "leadership ended by itself"
		case <-t.C:
			reason = "validity ended"
		}
		t.Stop()
	} else {
		time.Sleep(time.Duration(mrand.Int64N(int64(r.cfg.MaxHold) + 1)))
	}
	g.Until = h.until()
	if h.lost != nil {
		g.Lost = h.lost()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	g.ReleaseStart = time.Now()
	g.ReleaseErr = h.release(ctx)
	g.ReleaseEnd = time.Now()
	cancel()
	if p != nil {
		p.ph.reason = reason
		p.ph.hold = g
		close(p.ph.ended)
	}
}

type takenPin struct {
	pin *modelPin
	ph  *pinnedHold
}

// takePin hands g to the pending pin of its name, if g qualifies: among
// others, its call was made for that pin (made), with the pin's lease. A
// call sent after the block but before the pin was pending has the run's
// shorter TTL, which a slow fault outlives (CI, 6 December 2026: a
// restart of 523 ms against a 492 ms lease).
func (r *ModelRun) takePin(h *handle, g *Hold, made *modelPin) *takenPin {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pin
	if p == nil || p != made || p.name != g.Name || len(p.got) >= p.want || g.Sent.Before(p.since) || (p.kind != "" && p.kind != g.Kind) {
		return nil
	}
	g.Pinned = p.phase
	ph := &pinnedHold{id: g.ID, client: g.Client, kind: g.Kind, slot: g.Slot, term: g.Term, until: g.Until, h: h, ended: make(chan struct{})}
	p.got = append(p.got, ph)
	if len(p.got) == p.want {
		close(p.full)
	}
	return &takenPin{pin: p, ph: ph}
}

// ModelPhase is one attack on held holds of the first name, as Round is for
// locks: the injector takes the name's lock keys on node Blocker itself (a
// competitor whose acquisition got only that node, P4), so that the next
// holds, pinned, hold exactly Victim and the third node; it checks that
// they do, runs Fault against Victim, frees Blocker, and waits until the
// competitors, who can now get Blocker, have been refused MinRefused times
// (a majority of Blocker and Victim would admit them if Victim had forgotten
// the pinned holds), and, where Victim is down, until holds of the other
// names were granted during the fault. Then the pinned holds are released
// (or, with Lose, end by themselves) and Heal runs. Every wait is bounded,
// and the pinned holds must still be valid when it is over: a phase that
// cannot show its fault biting fails with what it saw.
type ModelPhase struct {
	Victim, Blocker int
	// What names the fault.
	What string
	// Kind is the kind of hold to pin (a read-write lock's "read" or
	// "write"; "" for the others).
	Kind  string
	Fault func() error
	// Back: Victim answers again once Fault returns (a restart): the
	// pinned holds must be on it then, and the refusals count from then.
	// Otherwise Victim is down until Heal, and holds of the other names
	// must be granted meanwhile.
	Back bool
	// Lose: the pinned holds are not released: they must end by themselves
	// (a leader whose renewal cannot reach a majority loses its
	// leadership before its lease ends), which takes PinTTL.
	Lose bool
	// PinTTL replaces the run's PinTTL in this phase.
	PinTTL time.Duration
	Heal   func() error
}

// MinRefused is the number of competitors' refusals a phase waits for.
const MinRefused = 3

// waitingCall bounds a waiting call of the semaphore and read-write models
// (Acquire, RLock, WLock): long enough to be woken by a release, short
// enough that a phase's refusals keep coming.
const waitingCall = 200 * time.Millisecond

const phaseWait = 15 * time.Second

// blockLease is the lease of the blocker's keys, which the injector frees
// once the fault is injected: it outlives every bounded wait before.
const blockLease = time.Minute

// Phase runs one phase. The cluster must have three nodes.
func (r *ModelRun) Phase(ph ModelPhase) (err error) {
	r.mu.Lock()
	n := len(r.phases) + 1
	r.mu.Unlock()
	res := PhaseResult{What: ph.What, Victim: ph.Victim, Blocker: ph.Blocker, Start: time.Since(r.origin)}
	defer func() {
		res.End, res.Holds = time.Since(r.origin), r.Holds()
		r.mu.Lock()
		r.phases = append(r.phases, res)
		r.mu.Unlock()
		if err != nil {
			err = fmt.Errorf("%s phase %d (%s): %w", r.cfg.Name, n, ph.What, err)
		}
	}()
	third := 3 - ph.Victim - ph.Blocker
	name := r.cfg.Names[0]
	victim, blocker, other := r.cfg.Cluster.Node(ph.Victim), r.cfg.Cluster.Node(ph.Blocker), r.cfg.Cluster.Node(third)

	if err := r.ops.ready(r, name, time.Now().Add(phaseWait)); err != nil {
		return err
	}

	// Block: the lock keys of name on the blocker.
	token := fmt.Sprintf("injector-%d", n)
	keys := r.ops.keys(name)
	deadline := time.Now().Add(phaseWait)
	for _, k := range keys {
		for {
			ok, err := redisDo(blocker.ProxyAddr(), "SET", k, token, "NX", "PX", blockLease.Milliseconds())
			if err == nil && ok != nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("could not take %s on node %d within %v: %v", k, ph.Blocker, phaseWait, err)
			}
			time.Sleep(time.Millisecond)
		}
	}
	blockedAt := time.Now()
	r.Note("phase %d: injector holds %s's keys on node %d", n, name, ph.Blocker)
	freed := false
	free := func() {
		if freed {
			return
		}
		freed = true
		for _, k := range keys {
			_, err := redisDo(blocker.ProxyAddr(), "EVAL",
				"if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0", 1, k, token)
			if err != nil {
				r.Note("phase %d: freeing %s on node %d failed: %v (it expires by itself)", n, k, ph.Blocker, err)
			}
		}
		r.Note("phase %d: injector freed node %d", n, ph.Blocker)
	}
	defer free()

	// Pin the next holds, granted to calls made after the block.
	p := &modelPin{phase: ph.What, name: name, kind: ph.Kind, since: blockedAt, want: r.ops.pins(), ttl: r.cfg.PinTTL,
		full: make(chan struct{}), release: make(chan struct{})}
	if ph.PinTTL != 0 {
		p.ttl = ph.PinTTL
	}
	// A restarted victim broke the holders' connections to it: the first
	// call on each fails (docs/testing.md §6), and a release that fails
	// there leaves the key until its lease ends, keeping the next phase's
	// holds off the node for seconds. A renewal first makes the release's
	// call a fresh connection's.
	p.renew = ph.Back
	r.mu.Lock()
	r.pin = p
	r.mu.Unlock()
	released := false
	releasePins := func() {
		if !released {
			released = true
			close(p.release)
		}
	}
	defer func() {
		r.mu.Lock()
		r.pin, r.watch = nil, nil
		r.mu.Unlock()
		releasePins()
	}()
	select {
	case <-p.full:
	case <-time.After(phaseWait):
		r.mu.Lock()
		got := len(p.got)
		r.pin = nil
		r.mu.Unlock()
		return fmt.Errorf("only %d of %d holds of %s pinned within %v", got, p.want, name, phaseWait)
	}
	pinned := p.got
	until := pinned[0].until
	var desc []string
	for _, pp := range pinned {
		res.Pinned = append(res.Pinned, pp.id)
		if pp.until.Before(until) {
			until = pp.until
		}
		desc = append(desc, fmt.Sprintf("hold %d (client %d, %s%s) until %s", pp.id, pp.client, pp.kind, pinDetail(pp), r.rel(pp.until)))
	}
	r.Note("phase %d: pinned %s", n, strings.Join(desc, ", "))

	// The pinned holds must hold exactly the victim and the third node.
	for _, pp := range pinned {
		var where []string
		okV, seenV := pp.h.on(victim.ProxyAddr())
		okT, seenT := pp.h.on(other.ProxyAddr())
		okB, seenB := pp.h.on(blocker.ProxyAddr())
		where = append(where, fmt.Sprintf("node %d: %s", ph.Victim, seenV), fmt.Sprintf("node %d: %s", third, seenT),
			fmt.Sprintf("node %d: %s", ph.Blocker, seenB))
		if !okV || !okT || okB {
			return fmt.Errorf("pinned hold %d does not hold exactly nodes %d and %d: %s", pp.id, ph.Victim, third, strings.Join(where, ", "))
		}
		pp.onV = seenV
		r.Note("phase %d: hold %d: %s", n, pp.id, strings.Join(where, ", "))
	}

	// The fault.
	w := &phaseWatch{name: name, pinKind: ph.Kind}
	r.mu.Lock()
	w.faultAt = time.Now()
	r.watch = w
	r.mu.Unlock()
	r.Note("phase %d: fault on node %d: %s", n, ph.Victim, ph.What)
	start := time.Now()
	if err := ph.Fault(); err != nil {
		return fmt.Errorf("fault: %w", err)
	}
	res.Took = time.Since(start)
	r.Note("phase %d: fault injected in %v", n, res.Took.Round(time.Millisecond))
	if !time.Now().Before(until) {
		return fmt.Errorf("the fault took %v: the pinned holds' lease ended (%s) before it was done, so it showed nothing; give the phase a longer PinTTL",
			res.Took.Round(time.Millisecond), r.rel(until))
	}
	if ph.Back {
		for _, pp := range pinned {
			ok, seen := pp.h.on(victim.ProxyAddr())
			if !ok || seen != pp.onV {
				return fmt.Errorf("node %d came back without pinned hold %d: it has %s, it had %s", ph.Victim, pp.id, seen, pp.onV)
			}
		}
		r.Note("phase %d: node %d came back with the pinned holds", n, ph.Victim)
	}

	free()
	r.mu.Lock()
	w.since = time.Now()
	r.mu.Unlock()

	// Wait for the competitors' refusals (and the rest) while the pinned
	// holds are valid.
	wantShared := ph.Kind == KindRead
	met := func() (bool, string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		res.Refused, res.Shared, res.During = w.refused, w.shared, w.other
		seen := fmt.Sprintf("%d refusals of conflicting attempts on %s, %d read locks shared with the pinned one, %d holds of the other names granted since the fault",
			w.refused, name, w.shared, w.other)
		return w.refused >= MinRefused && (!wantShared || w.shared >= 1) && (ph.Back || w.other >= 1), seen
	}
	by := time.Now().Add(phaseWait)
	if until.Before(by) {
		by = until
	}
	timer := time.NewTimer(time.Until(by))
	defer timer.Stop()
	for {
		ok, seen := met()
		if ok {
			if !time.Now().Before(until) {
				return fmt.Errorf("the pinned holds' validity ended (%s) before the phase had seen enough: %s", r.rel(until), seen)
			}
			r.Note("phase %d: %s", n, seen)
			break
		}
		select {
		case <-r.poke:
			continue
		case <-timer.C:
		}
		return fmt.Errorf("by %s (the pinned holds valid until %s) the phase had seen only %s", r.rel(time.Now()), r.rel(until), seen)
	}

	// End the pinned holds.
	if !ph.Lose {
		releasePins()
	}
	for _, pp := range pinned {
		// Bounded by the lease at the grant, a renewed leader's included
		// (h.until is zero once the release has begun).
		wait := phaseWait + p.ttl + max(time.Until(pp.until), 0)
		select {
		case <-pp.ended:
		case <-time.After(wait):
			return fmt.Errorf("pinned hold %d did not end within %v", pp.id, wait)
		}
		res.Ended = append(res.Ended, pp.reason)
		r.Note("phase %d: pinned hold %d ended (%s), valid until %s; release: %v", n, pp.id, pp.reason, r.rel(pp.hold.Until), pp.hold.ReleaseErr)
		if ph.Lose && (pp.hold.Lost == nil || !errors.Is(pp.hold.Lost, redlock.ErrLockLost)) {
			return fmt.Errorf("pinned hold %d was to lose its leadership by itself, but it ended thus: %s (cause %v)", pp.id, pp.reason, pp.hold.Lost)
		}
	}
	releasePins()
	if ph.Heal != nil {
		if err := ph.Heal(); err != nil {
			return fmt.Errorf("heal: %w", err)
		}
		r.Note("phase %d: healed", n)
	}
	return nil
}

func errOr(err error, ok string) string {
	if err == nil {
		return ok
	}
	return err.Error()
}

func pinDetail(pp *pinnedHold) string {
	switch pp.kind {
	case KindLeader:
		return fmt.Sprintf(" term %d", pp.term)
	case KindPermit:
		return fmt.Sprintf(" slot %d", pp.slot)
	}
	return ""
}

func (r *ModelRun) rel(t time.Time) string {
	return fmt.Sprintf("%+.3fms", float64(t.Sub(r.origin).Microseconds())/1000)
}

func (r *ModelRun) halt() {
	select {
	case <-r.stop:
		return
	default:
	}
	close(r.stop)
	r.wg.Wait()
	for _, c := range r.clients {
		_ = c.Close()
	}
}

// ModelResult is what the checker found in a model's run.
type ModelResult struct {
	Holds      int
	Violations int
	Phases     []PhaseResult
	// Stepped says that this host's wall clock stepped during the run and
	// that every violation came after the first step: P2 was broken by the
	// environment for every node at once, so the run proves nothing either
	// way. Finish then reports the violations without failing the test;
	// the caller runs the scenario again (playModel) or skips it.
	Stepped bool
}

// Finish lets the workload run until it has MinHolds holds (bounded by
// MaxDuration), stops it, checks the holds with the model's checker,
// prints the scenario line and fails the test on a violation, on too few
// holds, and on a run that did not contend. Violations that all began
// after a step of this host's wall clock are reported, not failed
// (ModelResult.Stepped).
func (r *ModelRun) Finish() ModelResult {
	tb := r.tb
	tb.Helper()
	select {
	case <-r.enough:
	case <-time.After(time.Until(r.origin.Add(r.cfg.MaxDuration))):
	}
	r.halt()
	elapsed := time.Since(r.origin)
	r.mu.Lock()
	holds, notes, phases, steps := r.holds, r.notes, r.phases, r.steps
	r.mu.Unlock()

	v := r.ops.check(r, holds)
	var stepped time.Duration
	for _, st := range steps {
		stepped += max(st.By, -st.By)
	}
	refused, during := 0, 0
	for _, ph := range phases {
		refused += ph.Refused
		during += ph.During
	}
	if r.cfg.Model == Semaphore || r.cfg.Model == RWLock {
		v.extra += fmt.Sprintf(" waited_grants=%d", r.waited.Load())
	}
	line := fmt.Sprintf("fault scenario=%s acquisitions=%d violations=%d preconditions=%s phases=%d refused_in_phases=%d granted_during_faults=%d %s wall_clock_steps_ms=%d duration_ms=%d",
		r.cfg.Name, len(holds), v.violations, Held, len(phases), refused, during, v.extra, stepped.Milliseconds(), elapsed.Milliseconds())
	report(line)
	var ph []string
	for _, p := range phases {
		ph = append(ph, fmt.Sprintf("%v–%v (%d holds by then) %s on node %d (blocker %d): pinned %v, fault took %v, %d refusals, %d shared, %d granted elsewhere, ended: %s",
			p.Start.Round(time.Millisecond), p.End.Round(time.Millisecond), p.Holds, p.What, p.Victim, p.Blocker, p.Pinned,
			p.Took.Round(time.Millisecond), p.Refused, p.Shared, p.During, strings.Join(p.Ended, "; ")))
	}
	relErrs, fenceErrs := map[string]int{}, map[string]int{}
	var sample []string
	for _, g := range holds {
		if g.ReleaseErr != nil {
			relErrs[errKind(g.ReleaseErr)]++
		}
		if g.FenceErr != nil {
			fenceErrs[errKind(g.FenceErr)]++
		}
		for _, err := range []error{g.ReleaseErr, g.FenceErr} {
			if err != nil && len(sample) < 3 {
				sample = append(sample, fmt.Sprintf("hold %d (%s): %v", g.ID, g.Kind, err))
			}
		}
	}
	tb.Logf("%s: %v, %d attempts, %d holds, %s; renewals %d ok, %d failed; campaigns refused on the fence counters %d; release errors %v; writers' fence errors %v; phases:\n  %s\nfirst errors:\n  %s",
		r.cfg.Name, elapsed.Round(time.Millisecond), r.attempts.Load(), len(holds), v.extra, r.renewOK.Load(), r.renewFailed.Load(),
		r.fenceRefusals.Load(), relErrs, fenceErrs, strings.Join(ph, "\n  "), strings.Join(sample, "\n  "))

	if len(holds) < r.cfg.MinHolds {
		tb.Errorf("%s: only %d holds within %v (want %d)", r.cfg.Name, len(holds), r.cfg.MaxDuration, r.cfg.MinHolds)
	}
	for _, p := range v.problems {
		tb.Errorf("%s: %s", r.cfg.Name, p)
	}
	// A violation that began after the first wall-clock step is the
	// environment's (P2 broken on every node at once); one that began
	// before it is the library's.
	afterStep := allAfterStep(steps, v)
	fail := tb.Errorf
	if afterStep {
		fail = tb.Logf
	}
	if len(steps) > 0 {
		var ss []string
		for _, st := range steps {
			ss = append(ss, fmt.Sprintf("%v between %s and %s", st.By, r.rel(st.After), r.rel(st.At)))
		}
		say := tb.Logf
		if v.violations > 0 && !afterStep {
			say = tb.Errorf
		}
		verdict := "no violation came of it"
		switch {
		case afterStep:
			verdict = "every violation began after the first step: the run proves nothing, and is not counted as a failure"
		case v.violations > 0:
			verdict = "a violation began before the first step: the library's"
		}
		say("%s: this host's wall clock stepped against its monotonic clock during the run (%s): that breaks P2 for every node at once (they expire keys by it, the clients count validity by the monotonic clock); %s",
			r.cfg.Name, strings.Join(ss, ", "), verdict)
	}
	for i, f := range v.findings {
		if i == 3 {
			fail("%s: %d more findings not shown", r.cfg.Name, len(v.findings)-i)
			break
		}
		mark := map[int]bool{}
		for _, j := range f.holds {
			mark[holds[j].ID] = true
		}
		fail("%s: %s; timeline:\n%s", r.cfg.Name, f.text,
			Timeline(r.origin, f.at, r.cfg.TTL, "", timelineGrants(holds), notes, mark, 50))
	}
	if (tb.Failed() && len(v.findings) == 0) || testing.Verbose() {
		tb.Logf("fault events:\n%s", Timeline(r.origin, r.origin, time.Since(r.origin), "", nil, notes, nil, 0))
	}
	return ModelResult{Holds: len(holds), Violations: v.violations, Phases: phases, Stepped: afterStep}
}

// timelineGrants renders holds as grants for Timeline: the resource shows
// the name and the kind.
func timelineGrants(holds []*Hold) []*Grant {
	out := make([]*Grant, len(holds))
	for i, g := range holds {
		what := g.Name + "/" + g.Kind
		switch g.Kind {
		case KindLeader:
			what += fmt.Sprintf("(term %d)", g.Term)
		case KindPermit:
			what += fmt.Sprintf("(slot %d)", g.Slot)
		}
		out[i] = &Grant{ID: g.ID, Client: g.Client, Resource: what, Sent: g.Sent, Reply: g.Reply, Until: g.Until,
			Token: g.Term, FenceErr: g.FenceErr, Pinned: g.Pinned != "", ReleaseStart: g.ReleaseStart, ReleaseEnd: g.ReleaseEnd,
			ReleaseErr: g.ReleaseErr}
	}
	return out
}

// describe says what node addr has at key: "free", "the injector's",
// another's digest, or the error.
func describe(addr, key string) (string, string) {
	v, err := redis.String(redisDo(addr, "GET", key))
	switch {
	case errors.Is(err, redis.ErrNil):
		return "", "free"
	case err != nil:
		return "", err.Error()
	case strings.HasPrefix(v, "injector-") || strings.HasPrefix(v, "dummy-owner"):
		return v, "the injector's"
	}
	return v, redlock.Digest(v)
}

// electionOps: candidates Campaign for the election (the context bounds one
// campaign to the attempt window), lead briefly and Resign; a pinned
// leader leads until the injector says, or until its leadership ends.
type electionOps struct{}

func (electionOps) kind(string) string { return KindLeader }

func (electionOps) try(ctx context.Context, r *ModelRun, i int, name, _ string, ttl time.Duration) (*handle, *Hold, error) {
	opts := []redlock.DoOption{redlock.WithLockTTL(ttl)}
	if ttl != r.cfg.TTL {
		opts = append(opts, redlock.WithRenewEvery(ttl/10)) // a pinned leader renews through the fault
	}
	ld, err := r.clients[i].Campaign(ctx, name, fmt.Sprintf("client-%d", i), opts...)
	if err != nil {
		return nil, nil, err
	}
	h := leaderHandle(ld)
	h.renew = func(ctx context.Context) error { return ld.Proclaim(ctx, fmt.Sprintf("client-%d (again)", i)) }
	return h, &Hold{Kind: KindLeader, Term: ld.Term(), Until: ld.Until()}, nil
}

// leaderHandle is the handle of a leadership.
func leaderHandle(ld *redlock.Leadership) *handle {
	key := redlock.LockKey(KeyPrefix, ld.Name())
	term := ld.Term()
	return &handle{
		until: ld.Until,
		done:  ld.Done(),
		lost: func() error {
			if ld.Context().Err() == nil {
				return nil
			}
			return context.Cause(ld.Context())
		},
		release: ld.Resign,
		on:      func(addr string) (bool, string) { return leaderOn(addr, key, term) },
	}
}

// leaderOn reports whether node addr has the leader of term: its lock key,
// and beside it that holder's record of that term.
func leaderOn(addr, key string, term uint64) (bool, string) {
	tok, seen := describe(addr, key)
	if tok == "" || strings.HasPrefix(tok, "injector-") || strings.HasPrefix(tok, "dummy-owner") {
		return false, seen
	}
	stored, err := redis.String(redisDo(addr, "GET", node.MetaKey(key)))
	if err != nil {
		return false, fmt.Sprintf("lock key %s, record: %v", seen, err)
	}
	m, ok, err := node.ParseStoredMeta(stored, tok)
	switch {
	case err != nil:
		return false, fmt.Sprintf("lock key %s, record: %v", seen, err)
	case !ok:
		return false, fmt.Sprintf("lock key %s, record of another holder", seen)
	case m.Term != term:
		return false, fmt.Sprintf("the leader of term %d", m.Term)
	}
	return true, fmt.Sprintf("the leader of term %d", term)
}

func (electionOps) keys(name string) []string { return []string{redlock.LockKey(KeyPrefix, name)} }
func (electionOps) pins() int                 { return 1 }
func (electionOps) refusal(string, string) bool {
	return true
}

// ready waits until every node has the election's fence counter: with the
// blocker held, a leader holds exactly the other two nodes, and Campaign
// refuses a grant whose nodes lack the counter while others have it (the
// term could not be trusted).
func (electionOps) ready(r *ModelRun, name string, by time.Time) error {
	key := redlock.FenceKey(KeyPrefix, name)
	for {
		var missing []int
		for _, nd := range r.cfg.Cluster.Nodes() {
			if n, err := redis.Int(redisDo(nd.ProxyAddr(), "EXISTS", key)); err != nil || n != 1 {
				missing = append(missing, nd.Index())
			}
		}
		if len(missing) == 0 {
			return nil
		}
		if time.Now().After(by) {
			return fmt.Errorf("nodes %v still lack %s's fence counter", missing, name)
		}
		time.Sleep(5 * time.Millisecond) // the nodes cannot signal it
	}
}

func (electionOps) check(r *ModelRun, holds []*Hold) modelVerdict {
	in := make([]*history.Grant, len(holds))
	for i, g := range holds {
		in[i] = g.history()
	}
	rep := history.CheckElection(in)
	v := modelVerdict{violations: rep.Violations()}
	lost := 0
	var top uint64
	for _, g := range holds {
		if g.Lost != nil {
			lost++
		}
		top = max(top, g.Term)
	}
	v.extra = fmt.Sprintf("leaders=%d highest_term=%d lost=%d campaign_fence_refusals=%d", rep.Leaders, top, lost, r.fenceRefusals.Load())
	for _, o := range rep.Overlaps {
		v.findings = append(v.findings, finding{text: fmt.Sprintf("two leaders at once for %v: hold %d (term %d) and hold %d (term %d) of %s",
			o.To.Sub(o.From), holds[o.A].ID, holds[o.A].Term, holds[o.B].ID, holds[o.B].Term, holds[o.A].Name), holds: []int{o.A, o.B}, at: o.From})
	}
	for _, t := range rep.TermOrder {
		v.findings = append(v.findings, finding{text: fmt.Sprintf("term did not increase: hold %d (term %d) took over after hold %d (term %d)",
			holds[t.B].ID, holds[t.B].Term, holds[t.A].ID, holds[t.A].Term), holds: []int{t.A, t.B}, at: holds[t.B].Reply})
	}
	for _, t := range rep.SameTerm {
		v.findings = append(v.findings, finding{text: fmt.Sprintf("one term, two leaders: holds %d and %d, term %d",
			holds[t.A].ID, holds[t.B].ID, holds[t.A].Term), holds: []int{t.A, t.B}, at: holds[t.B].Reply})
	}
	return v
}

// semaphoreOps: users take a permit of the semaphore (TryAcquire, or
// Acquire waiting up to waitingCall), hold it briefly and release it; a
// phase pins as many permits as there are.
type semaphoreOps struct{ permits int }

func (semaphoreOps) kind(string) string { return KindPermit }

func (o semaphoreOps) try(ctx context.Context, r *ModelRun, i int, name, _ string, ttl time.Duration) (*handle, *Hold, error) {
	sem := r.sems[i][name] // only client i's goroutine uses r.sems[i]
	if sem == nil {
		var err error
		if sem, err = r.clients[i].Semaphore(name, o.permits); err != nil {
			return nil, nil, err
		}
		r.sems[i][name] = sem
	}
	var p *redlock.Permit
	var err error
	if mrand.IntN(2) == 0 { // one attempt
		p, err = sem.TryAcquire(ctx, redlock.WithPermitTTL(ttl))
	} else { // or a wait, woken by a release, for a bounded time
		wctx, cancel := context.WithTimeout(ctx, waitingCall)
		p, err = sem.Acquire(wctx, redlock.WithPermitTTL(ttl))
		cancel()
		if err == nil {
			r.waited.Add(1)
		}
	}
	if err != nil {
		return nil, nil, err
	}
	key := redlock.LockKey(KeyPrefix, redlock.SemaphoreSlot(name, p.Slot()))
	return &handle{until: p.Until, release: p.Release, renew: p.Extend, on: func(addr string) (bool, string) {
		v, seen := describe(addr, key)
		return v != "" && !strings.HasPrefix(v, "injector-") && !strings.HasPrefix(v, "dummy-owner"), fmt.Sprintf("slot %d: %s", p.Slot(), seen)
	}}, &Hold{Kind: KindPermit, Slot: p.Slot(), Until: p.Until()}, nil
}

func (o semaphoreOps) keys(name string) []string {
	var keys []string
	for i := range o.permits {
		keys = append(keys, redlock.LockKey(KeyPrefix, redlock.SemaphoreSlot(name, i)))
	}
	return keys
}

func (o semaphoreOps) pins() int                              { return o.permits }
func (semaphoreOps) refusal(string, string) bool              { return true }
func (semaphoreOps) ready(*ModelRun, string, time.Time) error { return nil }
func (o semaphoreOps) check(r *ModelRun, holds []*Hold) modelVerdict {
	v := checkPermits(holds, o.permits)
	if r.waited.Load() == 0 {
		return withProblem(v, "no permit was granted to a waiting call (Acquire)")
	}
	return v
}

// checkPermits judges permits: at most n holders of a semaphore at once
// (CheckSemaphore), and, each slot being a lock, never two holders of one
// slot (Check on the slots).
func checkPermits(holds []*Hold, n int) modelVerdict {
	in := make([]*history.Grant, len(holds))
	slots := make([]*history.Grant, len(holds))
	for i, g := range holds {
		in[i] = g.history()
		s := *in[i]
		s.Resource = redlock.SemaphoreSlot(g.Name, g.Slot)
		slots[i] = &s
	}
	rep := history.CheckSemaphore(in, n)
	slotRep := history.Check(slots)
	v := modelVerdict{violations: rep.Violations() + len(slotRep.Overlaps)}
	v.extra = fmt.Sprintf("permits=%d most_holders=%d slot_overlaps=%d", n, rep.MostHolders, len(slotRep.Overlaps))
	for _, c := range rep.Crowds {
		var ids []string
		for _, j := range c.Holders {
			ids = append(ids, fmt.Sprintf("%d (slot %d)", holds[j].ID, holds[j].Slot))
		}
		v.findings = append(v.findings, finding{text: fmt.Sprintf("%d holders of %s at once for %v, more than its %d permits: holds %s",
			len(c.Holders), holds[c.Holders[0]].Name, c.To.Sub(c.From), n, strings.Join(ids, ", ")), holds: c.Holders, at: c.From})
	}
	for _, o := range slotRep.Overlaps {
		v.findings = append(v.findings, finding{text: fmt.Sprintf("two holders of slot %d of %s for %v: holds %d and %d",
			holds[o.A].Slot, holds[o.A].Name, o.To.Sub(o.From), holds[o.A].ID, holds[o.B].ID), holds: []int{o.A, o.B}, at: o.From})
	}
	if rep.MostHolders < n && rep.Violations() == 0 {
		// Each phase pins n permits at once: a run without n holders at
		// once did not contend.
		return withProblem(v, fmt.Sprintf("at most %d permits were ever held at once, of %d", rep.MostHolders, n))
	}
	return v
}

func withProblem(v modelVerdict, p string) modelVerdict {
	v.problems = append(v.problems, p)
	return v
}

// rwOps: readers (two attempts in three) and writers (TryRLock, TryWLock, or
// RLock, WLock waiting up to waitingCall);
// a writer takes its fencing token (Fence) once granted. While a pin of
// one kind is pending on a lock, its attempts are of that kind.
type rwOps struct{}

func (rwOps) kind(pinKind string) string {
	switch {
	case pinKind == conflictsWithRead && mrand.IntN(2) == 0:
		return KindWrite
	case pinKind == conflictsWithRead:
		return KindRead // a reader shares with the pinned one
	case pinKind != "":
		return pinKind
	case mrand.IntN(3) == 0:
		return KindWrite
	}
	return KindRead
}

// conflictsWithRead asks kind for the attempts made while a phase with a
// pinned read lock waits: half of them writers, which must be refused, half
// readers, which share.
const conflictsWithRead = "conflicts-with-read"

// conflicting returns the kind to ask for while a phase with pinned holds
// of pinKind waits.
func conflicting(pinKind string) string {
	if pinKind == KindRead {
		return conflictsWithRead
	}
	return ""
}

func (rwOps) try(ctx context.Context, r *ModelRun, i int, name, kind string, ttl time.Duration) (*handle, *Hold, error) {
	c := r.clients[i]
	// Half the calls wait (RLock, WLock), for a bounded time, woken by
	// releases; the others make one attempt. Not a writer while a read lock
	// is pinned or watched: a waiting writer marks the nodes against new
	// readers, and the phase is to see readers share the pinned one.
	wait := mrand.IntN(2) == 0
	if w, wk := r.watching(); kind == KindWrite && (w == name && wk == KindRead || r.readPinning(name)) {
		wait = false
	}
	if wait {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, waitingCall)
		defer cancel()
	}
	if kind == KindRead {
		rlock := c.TryRLock
		if wait {
			rlock = c.RLock
		}
		rl, err := rlock(ctx, name, redlock.WithLockTTL(ttl))
		if err != nil {
			return nil, nil, err
		}
		if wait {
			r.waited.Add(1)
		}
		return readHandle(rl), &Hold{Kind: KindRead, Until: rl.Until()}, nil
	}
	wlock := c.TryWLock
	if wait {
		wlock = c.WLock
	}
	l, err := wlock(ctx, name, redlock.WithLockTTL(ttl))
	if err != nil {
		return nil, nil, err
	}
	if wait {
		r.waited.Add(1)
	}
	h := writeHandle(l)
	h.then = func(ctx context.Context, g *Hold) { g.Term, g.FenceErr = l.Fence(ctx) }
	return h, &Hold{Kind: KindWrite, Until: l.Until()}, nil
}

func readHandle(rl *redlock.ReadLock) *handle {
	readers, _ := node.ReaderKeys(redlock.LockKey(KeyPrefix, rl.Resource()))
	token := rl.Token()
	return &handle{until: rl.Until, release: rl.Release, renew: rl.Extend, on: func(addr string) (bool, string) {
		_, err := redis.Int64(redisDo(addr, "ZSCORE", readers, token))
		switch {
		case errors.Is(err, redis.ErrNil):
			return false, "not among the readers"
		case err != nil:
			return false, err.Error()
		}
		return true, "among the readers"
	}}
}

func writeHandle(l *redlock.Lock) *handle {
	key := redlock.LockKey(KeyPrefix, l.Resource())
	return &handle{until: l.Until, release: l.Release, renew: l.Extend, on: func(addr string) (bool, string) {
		v, seen := describe(addr, key)
		if v == l.Token() {
			return true, "the writer's"
		}
		return false, seen
	}}
}

func (rwOps) keys(name string) []string { return []string{redlock.LockKey(KeyPrefix, name)} }
func (rwOps) pins() int                 { return 1 }

// refusal: a pinned reader conflicts with writers, a pinned writer with
// everyone.
func (rwOps) refusal(pinKind, kind string) bool { return pinKind != KindRead || kind == KindWrite }

func (rwOps) ready(*ModelRun, string, time.Time) error { return nil }

func (rwOps) check(r *ModelRun, holds []*Hold) modelVerdict {
	v := checkRW(holds)
	if r.waited.Load() == 0 {
		return withProblem(v, "no lock was granted to a waiting call (RLock, WLock)")
	}
	return v
}

func checkRW(holds []*Hold) modelVerdict {
	in := make([]*history.Grant, len(holds))
	fenceErrs := 0
	for i, g := range holds {
		in[i] = g.history()
		if g.FenceErr != nil {
			fenceErrs++
		}
	}
	rep := history.CheckRW(in)
	v := modelVerdict{violations: rep.Violations()}
	v.extra = fmt.Sprintf("reads=%d writes=%d shared_reads=%d writer_fence_errors=%d", rep.Reads, rep.Writes, rep.SharedReads, fenceErrs)
	for _, o := range rep.ReaderWriter {
		v.findings = append(v.findings, finding{text: fmt.Sprintf("a reader beside a writer for %v: hold %d (%s) and hold %d (%s) of %s",
			o.To.Sub(o.From), holds[o.A].ID, holds[o.A].Kind, holds[o.B].ID, holds[o.B].Kind, holds[o.A].Name), holds: []int{o.A, o.B}, at: o.From})
	}
	for _, o := range rep.Writers {
		v.findings = append(v.findings, finding{text: fmt.Sprintf("two writers at once for %v: holds %d and %d of %s",
			o.To.Sub(o.From), holds[o.A].ID, holds[o.B].ID, holds[o.A].Name), holds: []int{o.A, o.B}, at: o.From})
	}
	for _, t := range rep.TokenOrder {
		v.findings = append(v.findings, finding{text: fmt.Sprintf("writers' tokens out of order: hold %d (token %d) and hold %d (token %d)",
			holds[t.A].ID, holds[t.A].Term, holds[t.B].ID, holds[t.B].Term), holds: []int{t.A, t.B}, at: holds[t.B].Reply})
	}
	if rep.SharedReads == 0 && rep.Violations() == 0 {
		return withProblem(v, "no two readers ever shared the lock: the run did not contend")
	}
	return v
}

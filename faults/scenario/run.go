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
	"github.com/redlock-go/redlock/fence"
	"github.com/redlock-go/redlock/node"
)

// Preconditions says whether a scenario keeps the safety preconditions of
// docs/safety.md (Held) or breaks one on purpose (Broken).
type Preconditions string

// The two kinds of scenario.
const (
	Held   Preconditions = "held"
	Broken Preconditions = "broken"
)

// ReportEnv names an environment variable: when set to a file name, every
// scenario line is also appended to that file.
const ReportEnv = "REDLOCK_FAULT_REPORT"

// KeyPrefix is the clients' key prefix; the lock key of resource r is
// redlock.LockKey(KeyPrefix, r).
const KeyPrefix = "fault:"

// Config describes one run of the workload.
type Config struct {
	// Name is the scenario's name in the report line.
	Name string
	// Preconditions says whether the scenario keeps them.
	Preconditions Preconditions
	// Cluster holds the nodes. The clients reach every node through its proxy
	// (ProxyURL), whose address survives restarts and reconnections.
	Cluster *harness.Cluster
	// Clients is the number of clients (default 4), each a redlock.Client of
	// its own, with its own connections.
	Clients int
	// Resources are the locked resources (default "r0", "r1"). Rounds use the
	// first.
	Resources []string
	// TTL is the lease (default 500ms), the longest any client uses.
	TTL time.Duration
	// MaxHold bounds the random time an ordinary holder keeps the lock after
	// its first write (default 2ms).
	MaxHold time.Duration
	// Acquisitions is the least number of grants the run must see before it
	// stops (default 1000).
	Acquisitions int
	// MaxDuration bounds the workload (default 2 minutes); a run that reaches
	// it with too few grants fails.
	MaxDuration time.Duration
	// ClientOptions are added to every client's options.
	ClientOptions []redlock.Option
}

// Run is a workload in progress: clients that repeatedly acquire, write to a
// fenced resource with their token, and release, while a test injects faults.
type Run struct {
	tb      testing.TB
	cfg     Config
	origin  time.Time
	clients []*redlock.Client
	res     map[string]*resource
	stop    chan struct{}
	wg      sync.WaitGroup

	grantCount  atomic.Int64
	enough      chan struct{} // closed once the run has cfg.Acquisitions grants
	attempts    atomic.Int64
	quarantined atomic.Int64 // failed attempts in which a node was quarantined

	urls []string // the nodes' proxy URLs

	mu     sync.Mutex
	grants []*Grant
	notes  []Note
	pins   map[string]*pin
	rounds int
	cxs    []*Constructed // the counterexamples constructed
}

// resource is a fenced value that numbers the writes it handles, in order.
type resource struct {
	name string
	mu   sync.Mutex
	seq  int
	v    fence.Value[int]
}

func (r *resource) write(g *Grant) Write {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	err := r.v.Update(g.Token, func(n int) int { return n + 1 })
	return Write{At: time.Now(), Seq: r.seq, Accepted: err == nil, Err: err}
}

// pin is the injector's request to be told of the next holder of a resource,
// which then holds the lock until its validity ends.
type pin struct {
	got      chan Pinned
	released chan struct{}
}

// Pinned describes the holder the injector holds a lock with.
type Pinned struct {
	Grant  int
	Client int
	Token  uint64
	Until  time.Time
	// Released is closed once the holder has returned from Release.
	Released <-chan struct{}

	lockToken string
}

// Start dials the clients and starts the workload. The clients are closed by
// Finish (or at cleanup if Finish is never called).
func Start(tb testing.TB, cfg Config) *Run {
	tb.Helper()
	if cfg.Clients == 0 {
		cfg.Clients = 4
	}
	if len(cfg.Resources) == 0 {
		cfg.Resources = []string{"r0", "r1"}
	}
	if cfg.TTL == 0 {
		cfg.TTL = 500 * time.Millisecond
	}
	if cfg.MaxHold == 0 {
		cfg.MaxHold = 2 * time.Millisecond
	}
	if cfg.Acquisitions == 0 {
		cfg.Acquisitions = 1000
	}
	if cfg.MaxDuration == 0 {
		cfg.MaxDuration = 2 * time.Minute
	}
	r := &Run{
		tb: tb, cfg: cfg, origin: time.Now(),
		res: map[string]*resource{}, stop: make(chan struct{}), pins: map[string]*pin{},
		enough: make(chan struct{}),
	}
	for _, name := range append([]string{CounterexampleResource}, cfg.Resources...) {
		r.res[name] = &resource{name: name}
	}
	for _, n := range cfg.Cluster.Nodes() {
		r.urls = append(r.urls, n.ProxyURL())
	}
	opts := append([]redlock.Option{redlock.WithTTL(cfg.TTL), redlock.WithKeyPrefix(KeyPrefix)}, cfg.ClientOptions...)
	for i := 0; i < cfg.Clients; i++ {
		c, err := redlock.Dial(r.urls, opts...)
		if err != nil {
			tb.Fatalf("scenario %s: dial client %d: %v", cfg.Name, i, err)
		}
		r.clients = append(r.clients, c)
	}
	tb.Cleanup(r.halt) // in case Finish is not reached
	for i := range r.clients {
		r.wg.Add(1)
		go r.client(i)
	}
	return r
}

// Note records an injector event in the timeline.
func (r *Run) Note(format string, args ...any) {
	r.mu.Lock()
	r.notes = append(r.notes, Note{At: time.Now(), Text: fmt.Sprintf(format, args...)})
	r.mu.Unlock()
}

// record adds g to the timeline, numbering it, and returns it.
func (r *Run) record(g *Grant) *Grant {
	r.mu.Lock()
	r.grants = append(r.grants, g)
	g.ID = len(r.grants)
	r.mu.Unlock()
	if r.grantCount.Add(1) == int64(r.cfg.Acquisitions) {
		close(r.enough)
	}
	return g
}

// node returns the cluster's node i.
func (r *Run) node(i int) *harness.Node { return r.cfg.Cluster.Node(i) }

// rel formats t relative to the run's start, as the timeline does.
func (r *Run) rel(t time.Time) string {
	return fmt.Sprintf("%+.3fms", float64(t.Sub(r.origin).Microseconds())/1000)
}

// Grants returns the number of grants so far.
func (r *Run) Grants() int { return int(r.grantCount.Load()) }

// TTL returns the run's lease.
func (r *Run) TTL() time.Duration { return r.cfg.TTL }

func (r *Run) stopped() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

// sleep waits for d or until the run stops; it reports false if it stopped.
func (r *Run) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.stop:
		return false
	}
}

// client is one client's loop: pick a resource, try to acquire it for a
// while, fence, write, hold, release.
func (r *Run) client(i int) {
	defer r.wg.Done()
	c := r.clients[i]
	for !r.stopped() {
		name := r.cfg.Resources[mrand.IntN(len(r.cfg.Resources))]
		l, g := r.acquire(i, c, name)
		if l == nil {
			continue
		}
		r.hold(l, g)
	}
}

// acquire retries TryLock on name for up to the attempt window and returns
// the lock and its grant record, or nil.
func (r *Run) acquire(i int, c *redlock.Client, name string) (*redlock.Lock, *Grant) {
	window := min(r.cfg.TTL/2, 250*time.Millisecond)
	deadline := time.Now().Add(window)
	for !r.stopped() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		sent := time.Now()
		l, err := c.TryLock(ctx, name)
		reply := time.Now()
		cancel()
		r.attempts.Add(1)
		if err == nil {
			return l, r.record(&Grant{Client: i, Resource: name, Sent: sent, Reply: reply, Until: l.Until()})
		}
		if errors.Is(err, node.ErrQuarantined) {
			r.quarantined.Add(1)
		}
		if errors.Is(err, redlock.ErrClosed) || time.Now().After(deadline) {
			return nil, nil
		}
		if !r.sleep(time.Duration(2000+mrand.IntN(6000)) * time.Microsecond) {
			return nil, nil
		}
	}
	return nil, nil
}

// write checks the lease, then writes to the resource with the grant's token.
// It reports false when the lease has run out.
func (r *Run) write(l *redlock.Lock, g *Grant) bool {
	if !time.Now().Before(l.Until()) {
		return false
	}
	g.Writes = append(g.Writes, r.res[g.Resource].write(g))
	return true
}

// hold fences the lock, writes, holds it (to the end of its validity when
// the injector pinned it, briefly otherwise; some holders extend it) and
// releases it.
func (r *Run) hold(l *redlock.Lock, g *Grant) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	var pinned *pin
	token, err := l.Fence(ctx)
	cancel()
	if err != nil {
		g.FenceErr = err
	} else {
		g.Token = token
		if r.write(l, g) {
			pinned = r.takePin(l, g)
		}
	}
	switch {
	case pinned != nil:
		// Hold the lock to the end of its validity, writing now and then;
		// extend it once, half-way.
		step := max(r.cfg.TTL/10, time.Millisecond)
		extended := false
		for {
			left := time.Until(l.Until())
			if left <= 0 {
				break
			}
			time.Sleep(min(step, left))
			if !extended && time.Until(l.Until()) < r.cfg.TTL/2 {
				extended = true
				if !r.extend(l, g) {
					break
				}
			}
			if !r.write(l, g) {
				break
			}
		}
	case g.FenceErr == nil:
		time.Sleep(time.Duration(mrand.Int64N(int64(r.cfg.MaxHold) + 1)))
		if mrand.IntN(8) == 0 && !r.extend(l, g) {
			break
		}
		r.write(l, g)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	g.ReleaseStart = time.Now()
	g.ReleaseErr = l.Release(ctx)
	g.ReleaseEnd = time.Now()
	if pinned != nil {
		close(pinned.released)
	}
}

// extend renews the lease and records the call. It reports false when the
// holder must stop: the lock is lost (an unavailable majority leaves the
// lease valid until its old end).
func (r *Run) extend(l *redlock.Lock, g *Grant) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	e := Extension{Sent: time.Now()}
	e.Err = l.Extend(ctx)
	e.Done = time.Now()
	if e.Err == nil {
		g.Until = l.Until()
		e.Until = g.Until
	}
	g.Extensions = append(g.Extensions, e)
	return !errors.Is(e.Err, redlock.ErrLockLost)
}

// takePin hands g to a waiting injector, if one asked for g's resource.
func (r *Run) takePin(l *redlock.Lock, g *Grant) *pin {
	r.mu.Lock()
	p := r.pins[g.Resource]
	delete(r.pins, g.Resource)
	r.mu.Unlock()
	if p == nil {
		return nil
	}
	g.Pinned = true
	p.got <- Pinned{Grant: g.ID, Client: g.Client, Token: g.Token, Until: g.Until, Released: p.released, lockToken: l.Token()}
	return p
}

// Round is one attack on a held lock. The injector first waits until every
// node has every resource's fence counter, then takes the lock key on node
// Blocker itself, like a competitor whose acquisition got only that
// node and whose cleanup is late (a state the algorithm must tolerate, see P4
// in docs/safety.md). The next holder therefore holds a bare majority: the
// other two nodes, Victim among them. While it holds, Fault runs against
// Victim; then the injector frees Blocker, so that the other clients can take
// a majority of Blocker and Victim if, and only if, Victim has forgotten the
// holder's key. After the holder released, Heal runs.
type Round struct {
	Victim, Blocker int
	// What describes the fault in the timeline.
	What  string
	Fault func(p Pinned) error
	Heal  func() error
}

const roundWait = 15 * time.Second

// Round runs one round on the first resource. The run's cluster must have
// three nodes.
func (r *Run) Round(rd Round) (err error) {
	r.mu.Lock()
	r.rounds++
	n := r.rounds
	r.mu.Unlock()
	name := r.cfg.Resources[0]
	key := redlock.LockKey(KeyPrefix, name)
	blocker := r.cfg.Cluster.Node(rd.Blocker)
	token := fmt.Sprintf("injector-%d", n)

	// Start from healthy fencing: every node has every resource's counter. A
	// node that came back empty in an earlier round lacks them until a fenced
	// grant repairs it. Meanwhile, with the blocker held, no grant of the
	// first resource could be fenced (too few trusted nodes), so no holder
	// would come forward; and a second node losing its counters before the
	// repair would leave a resource unfenceable for good (docs/testing.md).
	r.awaitFenced(fmt.Sprintf("round %d", n))

	deadline := time.Now().Add(roundWait)
	for {
		ok, err := redisDo(blocker.ProxyAddr(), "SET", key, token, "NX", "PX", (20 * r.cfg.TTL).Milliseconds())
		if err == nil && ok != nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("round %d: could not take %s on node %d: %v", n, key, rd.Blocker, err)
		}
		time.Sleep(time.Millisecond)
	}
	r.Note("round %d: injector holds %s on node %d (a competitor stuck on one node)", n, name, rd.Blocker)
	free := func() {
		r.Note("round %d: injector frees node %d", n, rd.Blocker)
		_, err := redisDo(blocker.ProxyAddr(), "EVAL",
			"if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0", 1, key, token)
		if err != nil {
			r.Note("round %d: freeing node %d failed: %v (the key expires by itself)", n, rd.Blocker, err)
		}
	}

	p := &pin{got: make(chan Pinned, 1), released: make(chan struct{})}
	r.mu.Lock()
	r.pins[name] = p
	r.mu.Unlock()
	var got Pinned
	select {
	case got = <-p.got:
	case <-time.After(roundWait):
		r.mu.Lock()
		delete(r.pins, name)
		r.mu.Unlock()
		free()
		return fmt.Errorf("round %d: no client acquired %s within %v", n, name, roundWait)
	}
	r.Note("round %d: grant %d (client %d, token %d) holds %s on the other two nodes until %+.3fms; fault on node %d: %s",
		n, got.Grant, got.Client, got.Token, name, float64(got.Until.Sub(r.origin).Microseconds())/1000, rd.Victim, rd.What)
	var where []string
	for _, nd := range r.cfg.Cluster.Nodes() {
		v, err := redis.String(redisDo(nd.ProxyAddr(), "GET", key))
		switch {
		case v == got.lockToken:
			where = append(where, fmt.Sprintf("node %d: the holder's", nd.Index()))
		case err != nil:
			where = append(where, fmt.Sprintf("node %d: %v", nd.Index(), err))
		default:
			where = append(where, fmt.Sprintf("node %d: another (%s)", nd.Index(), redlock.Digest(v)))
		}
	}
	r.Note("round %d: lock key of %s: %s", n, name, strings.Join(where, ", "))
	if rd.Fault != nil {
		if err = rd.Fault(got); err != nil {
			err = fmt.Errorf("round %d: fault: %w", n, err)
		}
		r.Note("round %d: fault injected (err=%v)", n, err)
	}
	free()
	select {
	case <-got.Released:
	case <-time.After(time.Until(got.Until) + roundWait):
		err = errors.Join(err, fmt.Errorf("round %d: holder did not release", n))
	}
	if rd.Heal != nil {
		herr := rd.Heal()
		if herr != nil {
			err = errors.Join(err, fmt.Errorf("round %d: heal: %w", n, herr))
		}
		r.Note("round %d: healed (err=%v)", n, herr)
	}
	r.Note("round %d: done", n)
	return err
}

// awaitFenced waits, up to roundWait, until every node has every resource's
// fence counter (fencedEverywhere), and notes it if they do not.
func (r *Run) awaitFenced(what string) {
	deadline := time.Now().Add(roundWait)
	for !r.fencedEverywhere() {
		if time.Now().After(deadline) {
			r.Note("%s: some node still lacks a fence counter after %v; going on", what, roundWait)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fencedEverywhere reports whether every node has the fence counter of every
// resource.
func (r *Run) fencedEverywhere() bool {
	keys := make([]any, 0, len(r.cfg.Resources))
	for _, name := range r.cfg.Resources {
		keys = append(keys, redlock.FenceKey(KeyPrefix, name))
	}
	for _, nd := range r.cfg.Cluster.Nodes() {
		n, err := redis.Int(redisDo(nd.ProxyAddr(), "EXISTS", keys...))
		if err != nil || n != len(keys) {
			return false
		}
	}
	return true
}

// redisDo runs one command on a fresh connection to addr, bounded by 2s.
func redisDo(addr, cmd string, args ...any) (any, error) {
	c, err := redis.Dial("tcp", addr, redis.DialConnectTimeout(2*time.Second),
		redis.DialReadTimeout(2*time.Second), redis.DialWriteTimeout(2*time.Second))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Do(cmd, args...)
}

// halt stops the clients, waits for them and closes them.
func (r *Run) halt() {
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

// Finish lets the workload run until it has made the configured number of
// acquisitions (bounded by MaxDuration), stops it, checks the timeline,
// prints the scenario line and fails the test on a violation: any stale write
// accepted, or, where the preconditions held, any overlap. Where they were
// broken, overlaps are reported and the first ones shown.
func (r *Run) Finish() Result {
	tb := r.tb
	tb.Helper()
	select {
	case <-r.enough:
	case <-time.After(time.Until(r.origin.Add(r.cfg.MaxDuration))):
	}
	r.halt()
	elapsed := time.Since(r.origin)

	r.mu.Lock()
	grants, notes, cxs := r.grants, r.notes, r.cxs
	r.mu.Unlock()
	res := Check(grants)
	for _, cx := range cxs {
		for _, o := range res.Overlaps {
			if (o.A == cx.A && o.B == cx.B) || (o.A == cx.B && o.B == cx.A) {
				res.Constructed = append(res.Constructed, o)
			}
		}
	}

	// duration_ms: from the clients' start to the check (the cluster's
	// start-up and teardown are not included).
	line := fmt.Sprintf("fault scenario=%s acquisitions=%d overlaps=%d stale_accepted=%d preconditions=%s duration_ms=%d",
		r.cfg.Name, res.Acquisitions, len(res.Overlaps), len(res.StaleAccepted), r.cfg.Preconditions, time.Since(r.origin).Milliseconds())
	report(line)
	var longest time.Duration
	for _, o := range res.Overlaps {
		longest = max(longest, o.Duration())
	}
	fenceErrs, extErrs, relErrs := map[string]int{}, map[string]int{}, map[string]int{}
	for _, g := range grants {
		if g.FenceErr != nil {
			fenceErrs[errKind(g.FenceErr)]++
		}
		for _, e := range g.Extensions {
			if e.Err != nil {
				extErrs[errKind(e.Err)]++
			}
		}
		if g.ReleaseErr != nil {
			relErrs[errKind(g.ReleaseErr)]++
		}
	}
	pinned, hit := 0, map[int]bool{}
	for _, g := range grants {
		if g.Pinned {
			pinned++
		}
	}
	for _, o := range res.Overlaps {
		for _, g := range []*Grant{o.A, o.B} {
			if g.Pinned {
				hit[g.ID] = true
			}
		}
	}
	tb.Logf("%s: %v, %d attempts (%d met a quarantined node), %d grants, %d rounds (%d of %d pinned holders overlapped); "+
		"writes accepted %d, refused %d; token order violations %d; fence errors %d %v; extended %d, extend errors %d %v; release errors %d %v; longest overlap %v; windows from the request sent: %d intersecting pairs",
		r.cfg.Name, elapsed.Round(time.Millisecond), r.attempts.Load(), r.quarantined.Load(), res.Acquisitions, r.rounds, len(hit), pinned,
		res.WritesAccepted, res.WritesRefused, res.TokenOrder, res.FenceErrors, fenceErrs, res.Extended, res.ExtendErrors, extErrs,
		res.ReleaseErrors, relErrs, longest, res.LooseOverlaps)

	// A broken precondition is demonstrated by its constructed
	// counterexample, whose overlap the checker must find; the rounds'
	// overlaps, if any, come from timing and prove nothing either way.
	if r.cfg.Preconditions == Broken && len(cxs) == 0 {
		tb.Errorf("%s: the preconditions are broken but no counterexample was constructed (Run.Counterexample)", r.cfg.Name)
	}
	for _, cx := range cxs {
		found := false
		for _, o := range res.Constructed {
			found = found || o.A == cx.A || o.B == cx.A
		}
		if !found {
			tb.Errorf("%s: the checker found no overlap of the constructed grants %d (A) and %d (B); steps:\n  %s\ntimeline:\n%s",
				r.cfg.Name, cx.A.ID, cx.B.ID, strings.Join(cx.Steps, "\n  "),
				Timeline(r.origin, cx.B.Reply, r.cfg.TTL, CounterexampleResource, grants, notes, map[int]bool{cx.A.ID: true, cx.B.ID: true}, 50))
		}
	}
	if res.Acquisitions < r.cfg.Acquisitions {
		tb.Errorf("%s: only %d acquisitions within %v (want %d)", r.cfg.Name, res.Acquisitions, r.cfg.MaxDuration, r.cfg.Acquisitions)
	}
	report := tb.Errorf
	if r.cfg.Preconditions == Broken {
		report = tb.Logf
	}
	for i, o := range res.Overlaps {
		if i == 3 {
			report("%s: %d more overlaps not shown", r.cfg.Name, len(res.Overlaps)-i)
			break
		}
		report("%s: overlap of %v: grant %d (client %d) and grant %d (client %d) on %s; timeline:\n%s",
			r.cfg.Name, o.Duration(), o.A.ID, o.A.Client, o.B.ID, o.B.Client, o.A.Resource,
			Timeline(r.origin, o.From, r.cfg.TTL, o.A.Resource, grants, notes,
				map[int]bool{o.A.ID: true, o.B.ID: true}, 50))
	}
	for i, s := range res.StaleAccepted {
		if i == 3 {
			tb.Errorf("%s: %d more stale writes accepted not shown", r.cfg.Name, len(res.StaleAccepted)-i)
			break
		}
		tb.Errorf("%s: stale write accepted: grant %d wrote token %d after a later grant's write; timeline:\n%s",
			r.cfg.Name, s.Grant.ID, s.Grant.Token,
			Timeline(r.origin, s.Write.At, r.cfg.TTL, s.Grant.Resource, grants, notes,
				map[int]bool{s.Grant.ID: true}, 50))
	}
	if tb.Failed() && len(res.Overlaps) == 0 && len(res.StaleAccepted) == 0 {
		tb.Logf("fault events:\n%s", Timeline(r.origin, r.origin, time.Since(r.origin), "", nil, notes, nil, 0))
	}
	return res
}

// errKind classifies a lock error for the summary.
func errKind(err error) string {
	kind := "other"
	switch {
	case errors.Is(err, redlock.ErrLockLost):
		kind = "lock-lost"
	case errors.Is(err, redlock.ErrUnavailable):
		kind = "unavailable"
	}
	if strings.Contains(err.Error(), "fence counter missing") {
		kind += "(counter-missing)"
	}
	return kind
}

// Package nodetest is the conformance suite of node.Node: every implementation
// (the core's *node.Redis, the goredis and rueidis adapter modules, yours) runs
// Run against a real Redis and must pass it. The suite uses the Node methods
// only, so it needs no access to the server; each subtest makes its own node
// with newNode and uses keys of its own, so the nodes of one Run may share a
// server (or a Sentinel set, or a Cluster).
//
// What it checks: Acquire is SET NX PX (one owner among concurrent callers, the
// TTL honoured, the fence counter read with it and exact for any uint64);
// Release and Extend are compare-and-delete and compare-and-PEXPIRE (a wrong
// token changes nothing; Extend never re-creates a key); WriteFence raises the
// counter only for the holder and never lowers it, RaiseFence raises an
// existing counter for anyone and never creates one, CreateFence creates the
// counter only where none exists and only for the holder (reporting an
// existing counter to anyone, writing nothing); a
// node notifies a release made with notify (Watch); the waiters' queue orders
// refused waiters by ticket, grants only to its head and wakes the head only,
// on its own channel; it queues a waiter only with a ticket within
// node.TicketBound of the server's clock and reports that clock; Ping answers; two
// lock clients over two such nodes exclude each other, fence and hand the lock
// over; read-write locks (rw.go): readers share, a writer excludes them and
// its mark keeps new readers out until it is granted or leaves, mixed
// reader TTLs never shorten the readers' set; every call returns promptly on a cancelled context and, with
// WithPause, with an error by its deadline on a server that stopped answering.
//
// The package is part of the core module (it imports the lock client), but
// only test code should import it.
package nodetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/stall"
	"github.com/redlock-go/redlock/node"
)

// Option configures Run.
type Option func(*config)

type config struct {
	pause   func(t *testing.T) (resume func())
	restart func(t *testing.T)
}

// WithPause lets Run check that calls return by their context's deadline when
// the server does not answer, and that the lock client's circuit breaker opens
// then and closes once it answers again (its probe is the node's Ping): pause must make every server behind the nodes
// stop answering (redistest.Server.Pause: SIGSTOP) and return a function that
// makes them answer again.
func WithPause(pause func(t *testing.T) (resume func())) Option {
	return func(c *config) { c.pause = pause }
}

// WithRestart declares that the nodes newNode returns quarantine a restarted
// server (node.WithRestartQuarantine, or the adapter's own quarantine, for
// longer than the suite runs after the restart), and lets Run check it last:
// restart must restart every server behind the nodes without its data (as a
// restart without persistence does). After it, every call that can grant a
// lock (Acquire, AcquireFair) fails with node.ErrQuarantined and grants
// nothing, on a node connected before the restart and on one made after it
// (the first call may instead fail with the error of a connection the
// restart closed),
// while releases, extensions, fence writes, leaves and Ping still work; and
// a lock client over such a node is refused with a QuorumError.
func WithRestart(restart func(t *testing.T)) Option {
	return func(c *config) { c.restart = restart }
}

// Run runs the suite as subtests of t. newNode returns a node connected to the
// server under test; the suite closes it.
func Run(t *testing.T, newNode func(t *testing.T) node.Node, opts ...Option) {
	t.Helper()
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	s := &suite{newNode: newNode, run: randomHex(6)}
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, node.Node, keys)
	}{
		{"Name", s.name},
		{"AcquireIsSetNX", s.acquireNX},
		{"AcquireOneOwnerAmongConcurrentCallers", s.acquireConcurrent},
		{"AcquireTTLExpires", s.acquireTTL},
		{"ReleaseIsCompareAndDelete", s.release},
		{"ExtendIsCompareAndPExpire", s.extend},
		{"ExtendNeverRecreates", s.extendNeverRecreates},
		{"FenceCounter", s.fenceCounter},
		{"ReadFenceInsideTheLock", s.readFence},
		{"WriteFenceOnlyForHolder", s.writeFence},
		{"RaiseFenceNeverCreates", s.raiseFence},
		{"CreateFenceOnlyWithoutCounterForHolder", s.createFence},
		{"Watch", s.watch},
		{"HolderMetadata", s.meta}, // meta.go
		{"FairQueue", s.fairQueue},
		{"TicketBound", s.ticketBound},
		{"Ping", s.ping},
		{"CancelledContext", s.cancelled},
		{"ReadWrite", s.readWrite},   // rw.go
		{"LeaveWrite", s.leaveWrite}, // rw.go
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := s.node(t)
			tc.fn(t, n, s.keys(t))
		})
	}
	t.Run("LockClient", s.lockClient)
	if cfg.pause != nil {
		t.Run("DeadlineOnUnresponsiveServer", func(t *testing.T) {
			s.deadline(t, s.node(t), s.keys(t), cfg.pause)
		})
		t.Run("BreakerOpensAndCloses", func(t *testing.T) { s.breaker(t, cfg.pause) })
	}
	if cfg.restart != nil {
		t.Run("QuarantineAfterRestart", func(t *testing.T) { s.quarantine(t, cfg.restart) })
	}
}

// breaker checks the lock client's circuit breaker over the node: calls that
// time out on a paused server open it (the next calls fail at once with
// ErrNodeDown, without waiting for the node timeout), and once the server
// answers again the breaker's probe (Ping) closes it and a lock is granted.
func (s *suite) breaker(t *testing.T, pause func(t *testing.T) func()) {
	n := s.node(t)
	resource := fmt.Sprintf("nodetest-breaker-%s-%d", s.run, s.seq.Add(1))
	// The first calls over a new node dial, load the scripts (NOSCRIPT, then
	// EVAL) and, in a cluster, learn the slots: on a loaded machine more than
	// the 200 ms node timeout below (CI run u10, 5 December 2026: the goredis
	// cluster's first TryLock timed out). They are made first by a client
	// with a generous timeout, so that the breaker counts only the pause.
	warm, err := redlock.New([]node.Node{n}, redlock.WithNodeTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	wl, err := warm.TryLock(ctx(t), resource)
	if err != nil {
		t.Fatalf("TryLock to warm the node up: %v", err)
	}
	if err := wl.Release(ctx(t)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := warm.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	states := make(chan redlock.NodeState, 64)
	c, err := redlock.New([]node.Node{n}, redlock.WithTTL(time.Second), redlock.WithNodeTimeout(200*time.Millisecond), redlock.WithBreaker(2),
		redlock.WithHooks(redlock.Hooks{OnNodeHealth: func(e redlock.NodeHealthEvent) {
			select {
			case states <- e.State:
			default:
			}
		}}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.TryLock(ctx(t), resource)
	if err != nil {
		t.Fatalf("TryLock on a healthy server: %v", err)
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	resume := pause(t)
	resumed := false
	defer func() {
		if !resumed {
			resume()
		}
	}()
	c1 := ctx(t)
	for opened := false; !opened; {
		_, err := c.TryLock(c1, resource)
		if err == nil {
			t.Fatal("TryLock granted by a paused server")
		}
		if errors.Is(err, redlock.ErrNodeDown) {
			opened = true
		}
		if c1.Err() != nil {
			t.Fatalf("the breaker did not open while the server was paused: %v", err)
		}
	}
	start := time.Now()
	if _, err := c.TryLock(ctx(t), resource); !errors.Is(err, redlock.ErrNodeDown) {
		t.Fatalf("TryLock with the breaker open: %v, want ErrNodeDown", err)
	}
	if d := time.Since(start); d >= 200*time.Millisecond {
		t.Fatalf("TryLock with the breaker open took %v: it waited for the node", d)
	}
	resume()
	resumed = true
	c2 := ctx(t)
	for {
		select {
		case st := <-states:
			if st != redlock.NodeOK {
				continue
			}
			// Lock, not TryLock: attempts sent to the paused server
			// run when it resumes, and hold the key until the client's
			// cleanup releases them, or, when a release overtook its
			// SET on another connection, until their TTL (1 s) ends
			// (docs/safety.md: no guaranteed cleanup).
			l, err := c.Lock(c2, resource)
			if err != nil {
				t.Fatalf("Lock once the breaker closed: %v", err)
			}
			if err := l.Release(c2); err != nil {
				t.Fatalf("Release: %v", err)
			}
			return
		case <-c2.Done():
			t.Fatalf("the breaker did not close after the server answered again (Health: %+v)", c.Health())
		}
	}
}

// settled runs call again, up to twice, while it fails on a connection that a
// server restart closed: a backend with several connections to a node (an
// adapter's pool, its subscriber) meets each broken one once, whichever
// operation uses it first (a CI run: Release got EOF on rueidis after the
// grants had found the new server).
func settled(call func() (bool, error)) (bool, error) {
	ok, err := call()
	for try := 0; try < 2 && err != nil && closedConn(err); try++ {
		ok, err = call()
	}
	return ok, err
}

// closedConn tells an error of a connection the peer closed.
func closedConn(err error) bool {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "EOF") || strings.Contains(msg, "connection reset") || strings.Contains(msg, "broken pipe") || strings.Contains(msg, "closed")
}

// quarantine restarts the servers and checks that grants are refused, on a
// node connected before the restart and on a new one, and that nothing else
// is.
func (s *suite) quarantine(t *testing.T, restart func(t *testing.T)) {
	before, k := s.node(t), s.keys(t)
	tok := token()
	if !acquire(t, before, k, tok, time.Minute).OK {
		t.Fatal("Acquire on a fresh key refused")
	}
	restart(t)
	after := s.node(t)
	for name, n := range map[string]node.Node{"connected before the restart": before, "made after it": after} {
		c := ctx(t)
		grants := map[string]func() (node.Acquired, error){
			"Acquire": func() (node.Acquired, error) { return n.Acquire(c, k.lock, k.fence, token(), time.Minute) },
			"AcquireFair": func() (node.Acquired, error) {
				return n.AcquireFair(c, k.lock, k.fence, token(), time.Minute, waiter("q/"+token(), time.Now().UnixMicro(), 0))
			},
			// rw.go: a reader, a writer.
			"AcquireRead": func() (node.Acquired, error) { return n.AcquireRead(c, k.lock+"-rw", token(), time.Minute) },
			"AcquireWrite": func() (node.Acquired, error) {
				return n.AcquireWrite(c, k.lock+"-rw", k.fence+"-rw", token(), time.Minute, "w", time.Second)
			},
		}
		for op, call := range grants {
			// The first call after a restart may be the one that finds
			// the new server: it must not grant, but may fail with the
			// error of a connection the restart closed, or (an adapter
			// that takes a grant back) be refused for another reason;
			// the next one must be node.ErrQuarantined.
			var errs []error
			for try := 0; try < 3; try++ {
				a, err := call()
				if a.OK {
					t.Fatalf("%s on a node %s, the server restarted: granted (%+v, %v); want node.ErrQuarantined", op, name, a, err)
				}
				if err == nil {
					err = fmt.Errorf("refused (%+v), not quarantined", a)
				}
				if errors.Is(err, node.ErrQuarantined) {
					errs = nil
					break
				}
				errs = append(errs, err)
			}
			if errs != nil {
				t.Fatalf("%s on a node %s, the server restarted: %v; want node.ErrQuarantined", op, name, errs)
			}
		}
		if ok, err := settled(func() (bool, error) { return n.Release(c, k.lock, tok, true) }); err != nil || ok {
			t.Fatalf("Release on a node %s: %v, %v; want false (the key is gone), no error", name, ok, err)
		}
		if ok, err := settled(func() (bool, error) { return n.Extend(c, k.lock, tok, time.Minute) }); err != nil || ok {
			t.Fatalf("Extend on a node %s: %v, %v; want false, no error", name, ok, err)
		}
		if ok, err := settled(func() (bool, error) { return n.WriteFence(c, k.lock, k.fence, tok, 1) }); err != nil || ok {
			t.Fatalf("WriteFence on a node %s: %v, %v; want false, no error", name, ok, err)
		}
		if _, err := settled(func() (bool, error) { return false, n.LeaveQueue(c, k.lock, "q/1") }); err != nil {
			t.Fatalf("LeaveQueue on a node %s: %v", name, err)
		}
		if ok, err := settled(func() (bool, error) { ok, _, err := n.ReleaseFair(c, k.lock, tok, "q/1", true); return ok, err }); err != nil || ok {
			t.Fatalf("ReleaseFair on a node %s: %v, %v; want false, no error", name, ok, err)
		}
		if _, err := settled(func() (bool, error) { _, err := n.LeaveWrite(c, k.lock+"-rw", "w"); return false, err }); err != nil { // rw.go
			t.Fatalf("LeaveWrite on a node %s: %v", name, err)
		}
		if _, err := settled(func() (bool, error) { return false, n.Ping(c) }); err != nil {
			t.Fatalf("Ping on a node %s: %v", name, err)
		}
	}
	c, err := redlock.New([]node.Node{after})
	if err != nil {
		t.Fatalf("redlock.New: %v", err)
	}
	defer c.Close()
	_, err = c.TryLock(ctx(t), "quarantined-"+s.run)
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) || !errors.Is(err, node.ErrQuarantined) {
		t.Fatalf("TryLock over a quarantined node: %v; want a QuorumError wrapping node.ErrQuarantined", err)
	}
}

type suite struct {
	newNode func(t *testing.T) node.Node
	run     string // distinguishes the keys of two runs on one server
	seq     atomic.Int64
}

// keys is one subtest's lock key and fence key, in one hash slot.
type keys struct{ lock, fence string }

func (s *suite) keys(t *testing.T) keys {
	tag := fmt.Sprintf("%s-%d-%s", s.run, s.seq.Add(1), strings.ReplaceAll(t.Name(), "/", "."))
	return keys{lock: "nodetest:{" + tag + "}", fence: "nodetest:{" + tag + "}:fence"}
}

func (s *suite) node(t *testing.T) node.Node {
	t.Helper()
	n := s.newNode(t)
	if n == nil {
		t.Fatal("nodetest: newNode returned nil")
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return n
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func token() string { return randomHex(16) }

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return c
}

func acquire(t *testing.T, n node.Node, k keys, tok string, ttl time.Duration) node.Acquired {
	t.Helper()
	a, err := n.Acquire(ctx(t), k.lock, k.fence, tok, ttl)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	return a
}

func must(t *testing.T, what string, ok bool, err error, want bool) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if ok != want {
		t.Fatalf("%s reported %v, want %v", what, ok, want)
	}
}

func (s *suite) name(t *testing.T, n node.Node, _ keys) {
	if strings.TrimSpace(n.Name()) == "" {
		t.Fatal("Name is empty")
	}
}

func (s *suite) acquireNX(t *testing.T, n node.Node, k keys) {
	a, b := token(), token()
	if got := acquire(t, n, k, a, time.Minute); got != (node.Acquired{OK: true}) {
		t.Fatalf("first Acquire on a fresh key = %+v, want {OK:true Fence:0 HasFence:false}", got)
	}
	if got := acquire(t, n, k, b, time.Minute); got.OK {
		t.Fatal("a second token acquired a held key")
	}
	if got := acquire(t, n, k, a, time.Minute); got.OK {
		t.Fatal("the holder's own token acquired its held key again: Acquire must be NX")
	}
}

func (s *suite) acquireConcurrent(t *testing.T, n node.Node, k keys) {
	const callers = 16
	var wg sync.WaitGroup
	var granted, failed atomic.Int32
	for range callers {
		wg.Go(func() {
			a, err := n.Acquire(ctx(t), k.lock, k.fence, token(), time.Minute)
			switch {
			case err != nil:
				failed.Add(1)
				t.Errorf("Acquire: %v", err)
			case a.OK:
				granted.Add(1)
			}
		})
	}
	wg.Wait()
	if g := granted.Load(); g != 1 {
		t.Fatalf("%d of %d concurrent Acquire calls were granted, want exactly 1", g, callers)
	}
}

func (s *suite) acquireTTL(t *testing.T, n node.Node, k keys) {
	if !acquire(t, n, k, token(), 150*time.Millisecond).OK {
		t.Fatal("Acquire on a fresh key refused")
	}
	if acquire(t, n, k, token(), time.Minute).OK {
		t.Fatal("acquired while the first lease runs")
	}
	time.Sleep(300 * time.Millisecond)
	if !acquire(t, n, k, token(), time.Minute).OK {
		t.Fatal("the key outlived its TTL (150ms, 300ms ago)")
	}
}

func (s *suite) release(t *testing.T, n node.Node, k keys) {
	a, b := token(), token()
	if !acquire(t, n, k, a, time.Minute).OK {
		t.Fatal("Acquire on a fresh key refused")
	}
	ok, err := n.Release(ctx(t), k.lock, b, true)
	must(t, "Release with another token", ok, err, false)
	if acquire(t, n, k, b, time.Minute).OK {
		t.Fatal("another token's Release deleted the key")
	}
	ok, err = n.Release(ctx(t), k.lock, a, false)
	must(t, "Release by the holder", ok, err, true)
	ok, err = n.Release(ctx(t), k.lock, a, true)
	must(t, "second Release", ok, err, false)
	if !acquire(t, n, k, b, time.Minute).OK {
		t.Fatal("the key survived its holder's Release")
	}
}

func (s *suite) extend(t *testing.T, n node.Node, k keys) {
	a, b := token(), token()
	if !acquire(t, n, k, a, 200*time.Millisecond).OK {
		t.Fatal("Acquire on a fresh key refused")
	}
	ok, err := n.Extend(ctx(t), k.lock, b, time.Minute)
	must(t, "Extend with another token", ok, err, false)
	ok, err = n.Extend(ctx(t), k.lock, a, time.Minute)
	must(t, "Extend by the holder", ok, err, true)
	time.Sleep(400 * time.Millisecond)
	if acquire(t, n, k, b, time.Minute).OK {
		t.Fatal("the key expired at its first TTL despite Extend")
	}
	ok, err = n.Extend(ctx(t), k.lock, a, 150*time.Millisecond)
	must(t, "Extend to a shorter TTL", ok, err, true)
	time.Sleep(300 * time.Millisecond)
	if !acquire(t, n, k, b, time.Minute).OK {
		t.Fatal("Extend did not set the new TTL")
	}
}

func (s *suite) extendNeverRecreates(t *testing.T, n node.Node, k keys) {
	a := token()
	ok, err := n.Extend(ctx(t), k.lock, a, time.Minute)
	must(t, "Extend of a missing key", ok, err, false)
	if !acquire(t, n, k, token(), time.Minute).OK {
		t.Fatal("Extend created the key")
	}
}

func (s *suite) fenceCounter(t *testing.T, n node.Node, k keys) {
	a := token()
	if got := acquire(t, n, k, a, time.Minute); got.HasFence || got.Fence != 0 {
		t.Fatalf("fresh resource: Acquire = %+v, want no counter", got)
	}
	for _, f := range []uint64{7, 1 << 53, 1<<53 + 1, math.MaxUint64} {
		ok, err := n.WriteFence(ctx(t), k.lock, k.fence, a, f)
		must(t, "WriteFence by the holder", ok, err, true)
		got := acquire(t, n, k, token(), time.Minute)
		if got.OK || !got.HasFence || got.Fence != f {
			t.Fatalf("after WriteFence(%d): Acquire by another = %+v, want refused with the counter %d (read even when the SET fails, exact above 2^53)", f, got, f)
		}
	}
}

// readFence checks an acquisition without the counter (fenceKey "") and
// ReadFence: the counter and whether the caller holds the lock, read
// together, nothing written.
func (s *suite) readFence(t *testing.T, n node.Node, k keys) {
	a, b := token(), token()
	read := func(tok string) node.Acquired {
		t.Helper()
		got, err := n.ReadFence(ctx(t), k.lock, k.fence, tok)
		if err != nil {
			t.Fatalf("ReadFence: %v", err)
		}
		return got
	}
	if got := read(a); got.OK || got.HasFence || got.Fence != 0 {
		t.Fatalf("ReadFence on a fresh resource = %+v, want not held, no counter", got)
	}
	if got := acquire(t, n, k, a, time.Minute); !got.OK {
		t.Fatalf("Acquire = %+v, want granted (ReadFence must not write the lock key)", got)
	}
	if got := read(a); !got.OK || got.HasFence {
		t.Fatalf("ReadFence by the holder = %+v, want held, no counter (ReadFence must not create one)", got)
	}
	ok, err := n.WriteFence(ctx(t), k.lock, k.fence, a, 1<<53+1)
	must(t, "WriteFence by the holder", ok, err, true)
	if got := read(a); !got.OK || !got.HasFence || got.Fence != 1<<53+1 {
		t.Fatalf("ReadFence by the holder = %+v, want held with the counter %d", got, uint64(1<<53+1))
	}
	if got := read(b); got.OK || !got.HasFence || got.Fence != 1<<53+1 {
		t.Fatalf("ReadFence by another = %+v, want not held, with the counter", got)
	}
	ok, err = n.Release(ctx(t), k.lock, a, false)
	must(t, "Release", ok, err, true)
	got, err := n.Acquire(ctx(t), k.lock, "", b, time.Minute)
	if err != nil || !got.OK || got.HasFence || got.Fence != 0 {
		t.Fatalf("Acquire without the fence key = %+v, %v; want granted, no counter read", got, err)
	}
	if got, err := n.Acquire(ctx(t), k.lock, "", a, time.Minute); err != nil || got.OK || got.HasFence {
		t.Fatalf("second Acquire without the fence key = %+v, %v; want refused, no counter read", got, err)
	}
	if got := read(b); !got.OK || got.Fence != 1<<53+1 {
		t.Fatalf("ReadFence after an Acquire without the counter = %+v, want held, the counter unchanged", got)
	}
	// The queued acquisition likewise: the counter only with the fence key.
	w := waiter("rf/1", time.Now().UnixMicro(), 0)
	got, err = n.AcquireFair(ctx(t), k.lock, "", a, time.Minute, w)
	if err != nil || got.OK || got.HasFence || got.Fence != 0 {
		t.Fatalf("AcquireFair without the fence key = %+v, %v; want refused (held), no counter read", got, err)
	}
	got, err = n.AcquireFair(ctx(t), k.lock, k.fence, a, time.Minute, w)
	if err != nil || got.OK || !got.HasFence || got.Fence != 1<<53+1 {
		t.Fatalf("AcquireFair with the fence key = %+v, %v; want refused (held), with the counter", got, err)
	}
	if err := n.LeaveQueue(ctx(t), k.lock, w.ID); err != nil {
		t.Fatalf("LeaveQueue: %v", err)
	}
}

func (s *suite) writeFence(t *testing.T, n node.Node, k keys) {
	a, b := token(), token()
	ok, err := n.WriteFence(ctx(t), k.lock, k.fence, a, 5)
	must(t, "WriteFence without the lock", ok, err, false)
	if got := acquire(t, n, k, a, time.Minute); !got.OK || got.HasFence {
		t.Fatalf("Acquire = %+v: a refused WriteFence must not create the counter", got)
	}
	ok, err = n.WriteFence(ctx(t), k.lock, k.fence, b, 5)
	must(t, "WriteFence with another token", ok, err, false)
	ok, err = n.WriteFence(ctx(t), k.lock, k.fence, a, 100)
	must(t, "WriteFence by the holder", ok, err, true)
	ok, err = n.WriteFence(ctx(t), k.lock, k.fence, a, 9)
	must(t, "WriteFence of a lower fence", ok, err, true)
	if got := acquire(t, n, k, b, time.Minute); got.Fence != 100 {
		t.Fatalf("counter = %d, want 100: WriteFence never lowers it", got.Fence)
	}
	ok, err = n.Release(ctx(t), k.lock, a, false)
	must(t, "Release", ok, err, true)
	ok, err = n.WriteFence(ctx(t), k.lock, k.fence, a, 200)
	must(t, "WriteFence after Release", ok, err, false)
	if got := acquire(t, n, k, b, time.Minute); !got.OK || got.Fence != 100 {
		t.Fatalf("Acquire = %+v, want granted with counter 100 (the counter outlives the lock)", got)
	}
}

func (s *suite) raiseFence(t *testing.T, n node.Node, k keys) {
	if err := n.RaiseFence(ctx(t), k.fence, 7); err != nil {
		t.Fatalf("RaiseFence: %v", err)
	}
	a := token()
	if got := acquire(t, n, k, a, time.Minute); !got.OK || got.HasFence {
		t.Fatalf("Acquire = %+v, want granted without a counter: RaiseFence never creates one", got)
	}
	ok, err := n.WriteFence(ctx(t), k.lock, k.fence, a, 1)
	must(t, "WriteFence by the holder", ok, err, true)
	for _, tc := range []struct{ raise, want uint64 }{{3, 3}, {2, 3}, {1<<53 + 1, 1<<53 + 1}, {1 << 53, 1<<53 + 1}} {
		if err := n.RaiseFence(ctx(t), k.fence, tc.raise); err != nil {
			t.Fatalf("RaiseFence: %v", err)
		}
		got := acquire(t, n, k, token(), time.Minute)
		if !got.HasFence || got.Fence != tc.want {
			t.Fatalf("after RaiseFence(%d): counter %+v, want %d (raised whoever holds the lock, never lowered)", tc.raise, got, tc.want)
		}
	}
}

func (s *suite) createFence(t *testing.T, n node.Node, k keys) {
	a, b := token(), token()
	held, existed, err := n.CreateFence(ctx(t), k.lock, k.fence, a, 3)
	if err != nil || held || existed {
		t.Fatalf("CreateFence without the lock = %v, %v, %v; want not held, no counter before", held, existed, err)
	}
	if got := acquire(t, n, k, a, time.Minute); !got.OK || got.HasFence {
		t.Fatalf("Acquire = %+v, want granted without a counter (CreateFence writes only inside the lock)", got)
	}
	held, existed, err = n.CreateFence(ctx(t), k.lock, k.fence, b, 3)
	if err != nil || held || existed {
		t.Fatalf("CreateFence with another token = %v, %v, %v; want not held, no counter before", held, existed, err)
	}
	held, existed, err = n.CreateFence(ctx(t), k.lock, k.fence, "", 3)
	if err != nil || held || existed {
		t.Fatalf("CreateFence with no token = %v, %v, %v; want not held, no counter before", held, existed, err)
	}
	if got := acquire(t, n, k, b, time.Minute); got.OK || got.HasFence {
		t.Fatalf("Acquire by another = %+v, want refused without a counter (CreateFence by a non-holder writes nothing)", got)
	}
	held, existed, err = n.CreateFence(ctx(t), k.lock, k.fence, a, 3)
	if err != nil || !held || existed {
		t.Fatalf("CreateFence by the holder = %v, %v, %v; want held, no counter before", held, existed, err)
	}
	if got := acquire(t, n, k, b, time.Minute); got.OK || !got.HasFence || got.Fence != 3 {
		t.Fatalf("Acquire by another = %+v, want refused with the counter 3", got)
	}
	for _, tok := range []string{a, b, ""} {
		held, existed, err = n.CreateFence(ctx(t), k.lock, k.fence, tok, 5)
		if err != nil || held || !existed {
			t.Fatalf("CreateFence over a counter = %v, %v, %v; want the counter reported, nothing written", held, existed, err)
		}
	}
	if got := acquire(t, n, k, b, time.Minute); got.Fence != 3 {
		t.Fatalf("counter = %d, want 3: CreateFence never changes an existing counter", got.Fence)
	}
	k3 := s.keys(t)
	if !acquire(t, n, k3, a, time.Minute).OK {
		t.Fatal("Acquire on a fresh key refused")
	}
	held, existed, err = n.CreateFence(ctx(t), k3.lock, k3.fence, a, math.MaxUint64)
	if err != nil || !held || existed {
		t.Fatalf("CreateFence by the holder = %v, %v, %v; want held, no counter before", held, existed, err)
	}
	if got := acquire(t, n, k3, b, time.Minute); got.OK || got.Fence != math.MaxUint64 {
		t.Fatalf("Acquire by another = %+v, want refused with the counter 2^64-1", got)
	}
}

func (s *suite) watch(t *testing.T, n node.Node, k keys) {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, stop, err := n.Watch(c, k.lock)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	defer stop()
	drain(ch)
	a := token()
	if !acquire(t, n, k, a, time.Minute).OK {
		t.Fatal("Acquire on a fresh key refused")
	}
	ok, err := n.Release(c, k.lock, a, true)
	must(t, "Release with notify", ok, err, true)
	select {
	case <-ch:
	case <-c.Done():
		t.Fatal("a Release with notify was not notified within 10s")
	}
	// The queue's release tells the key's channel, with nobody queued, when
	// asked to (a lock whose key is watched: a write lock, a semaphore's
	// slot, an election). Not asked, it tells nobody (TestUncontendedServerCommands
	// counts its commands; FairQueue sees the queue's head woken anyway).
	drain(ch)
	b := token()
	if !acquire(t, n, k, b, time.Minute).OK {
		t.Fatal("Acquire on a released key refused")
	}
	ok, _, err = n.ReleaseFair(c, k.lock, b, "", true)
	must(t, "ReleaseFair telling the key's watchers", ok, err, true)
	select {
	case <-ch:
	case <-c.Done():
		t.Fatal("a ReleaseFair telling the key's watchers, nobody queued, was not notified within 10s")
	}
	stop()
	stop() // idempotent
}

func drain(ch <-chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// calls are the Node calls on k with token tok.
func calls(n node.Node, k keys, tok string) map[string]func(context.Context) error {
	return map[string]func(context.Context) error{
		"Acquire": func(c context.Context) error {
			_, err := n.Acquire(c, k.lock, k.fence, tok, time.Minute)
			return err
		},
		"Release": func(c context.Context) error {
			_, err := n.Release(c, k.lock, tok, true)
			return err
		},
		"Extend": func(c context.Context) error {
			_, err := n.Extend(c, k.lock, tok, time.Minute)
			return err
		},
		"WriteFence": func(c context.Context) error {
			_, err := n.WriteFence(c, k.lock, k.fence, tok, 1)
			return err
		},
		"RaiseFence": func(c context.Context) error { return n.RaiseFence(c, k.fence, 1) },
		"ReadFence": func(c context.Context) error {
			_, err := n.ReadFence(c, k.lock, k.fence, tok)
			return err
		},
		"AcquireFair": func(c context.Context) error {
			_, err := n.AcquireFair(c, k.lock, k.fence, tok, time.Minute, waiter("calls/2", time.Now().UnixMicro(), 0))
			return err
		},
		"ReleaseFair": func(c context.Context) error {
			_, _, err := n.ReleaseFair(c, k.lock, tok, "calls/2", true)
			return err
		},
		"LeaveQueue": func(c context.Context) error { return n.LeaveQueue(c, k.lock, "calls/2") },
		"Watch": func(c context.Context) error {
			_, stop, err := n.Watch(c, k.lock+":calls")
			if stop != nil {
				stop()
			}
			return err
		},
		"Ping": func(c context.Context) error { return n.Ping(c) },
		// rw.go: read-write locks.
		"AcquireRead": func(c context.Context) error {
			_, err := n.AcquireRead(c, k.lock+"-rw", tok, time.Minute)
			return err
		},
		"ExtendRead": func(c context.Context) error {
			_, err := n.ExtendRead(c, k.lock+"-rw", tok, time.Minute)
			return err
		},
		"ReleaseRead": func(c context.Context) error {
			_, err := n.ReleaseRead(c, k.lock+"-rw", tok, true)
			return err
		},
		"AcquireWrite": func(c context.Context) error {
			_, err := n.AcquireWrite(c, k.lock+"-rw", k.fence+"-rw", tok, time.Minute, "calls/w", time.Second)
			return err
		},
		"LeaveWrite": func(c context.Context) error {
			_, err := n.LeaveWrite(c, k.lock+"-rw", "calls/w")
			return err
		},
	}
}

func (s *suite) cancelled(t *testing.T, n node.Node, k keys) {
	tok := token()
	if !acquire(t, n, k, tok, time.Minute).OK { // connected: the check is not about dialing
		t.Fatal("Acquire on a fresh key refused")
	}
	c, cancel := context.WithCancel(context.Background())
	cancel()
	// Another token: a call that ran anyway must not change the outcome. An
	// error is not required: a node with a ready connection may answer at
	// once (the core's pipelined node sometimes does); only waiting is.
	for name, call := range calls(n, k, token()) {
		start := time.Now()
		_ = call(c)
		if took := time.Since(start); took > 250*time.Millisecond {
			t.Errorf("%s on a cancelled context took %v", name, took)
		}
	}
	ok, err := n.Release(ctx(t), k.lock, tok, false)
	must(t, "Release after the cancelled calls", ok, err, true)
}

func (s *suite) deadline(t *testing.T, n node.Node, k keys, pause func(t *testing.T) func()) {
	tok := token()
	if !acquire(t, n, k, tok, time.Minute).OK {
		t.Fatal("Acquire on a fresh key refused")
	}
	resume := pause(t)
	resumed := false
	defer func() {
		if !resumed {
			resume()
		}
	}()
	const d = 200 * time.Millisecond
	var wg sync.WaitGroup
	// A call may be late by as long as this process could not run (a loaded
	// machine: a CI run saw every call 500 ms late at once), not more.
	meter := stall.Start(0)
	defer meter.Stop()
	// Another token: the paused server runs the queued calls once it resumes.
	for name, call := range calls(n, k, token()) {
		wg.Go(func() {
			c, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			start := time.Now()
			err := call(c)
			if took, stalled := time.Since(start), meter.Since(start); took > d+300*time.Millisecond+stalled {
				t.Errorf("%s on an unresponsive server took %v with a %v deadline (the process stalled %v meanwhile)", name, took, d, stalled)
			}
			if err == nil {
				t.Errorf("%s on an unresponsive server returned no error", name)
			}
		})
	}
	wg.Wait()
	resume()
	resumed = true
	// The node recovers once the server answers again.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, err := n.Release(ctx(t), k.lock, tok, true)
		if err == nil {
			if !ok {
				t.Fatal("the held key vanished while the server was paused")
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node did not recover within 10s of the server's resumption: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// lockClient runs the lock client over the node: two clients of one node each
// exclude each other, fence in order and hand the lock over.
func (s *suite) lockClient(t *testing.T) {
	n1, n2 := s.node(t), s.node(t)
	c1, err := redlock.New([]node.Node{n1}, redlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	c2, err := redlock.New([]node.Node{n2}, redlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	resource := fmt.Sprintf("nodetest-%s-%d", s.run, s.seq.Add(1))
	l1, err := c1.TryLock(ctx(t), resource)
	if err != nil {
		t.Fatalf("TryLock: %v", err)
	}
	if _, err := c2.TryLock(ctx(t), resource); !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("second client's TryLock: %v, want ErrNotAcquired", err)
	}
	f1, err := l1.Fence(ctx(t))
	if err != nil || f1 == 0 {
		t.Fatalf("Fence = %d, %v", f1, err)
	}
	if err := l1.Extend(ctx(t)); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	got := make(chan error, 1)
	var l2 *redlock.Lock
	go func() {
		var err error
		l2, err = c2.Lock(ctx(t), resource)
		got <- err
	}()
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-got:
		t.Fatalf("Lock returned while the lock was held: %v", err)
	default:
	}
	if err := l1.Release(ctx(t)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("Lock after the release: %v", err)
	}
	f2, err := l2.Fence(ctx(t))
	if err != nil || f2 <= f1 {
		t.Fatalf("second holder's Fence = %d, %v; want above %d", f2, err, f1)
	}
	if err := l2.Release(ctx(t)); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// waiter is a waiter of the queue tests, ticketed at time now plus offset µs
// (a node queues a waiter only within node.TicketBound of its clock).
func waiter(id string, now, offset int64) node.Waiter {
	return node.Waiter{ID: id, Ticket: now + offset, Lease: time.Minute}
}

func (s *suite) fairQueue(t *testing.T, n node.Node, k keys) {
	c := ctx(t)
	now := time.Now().UnixMicro()
	next, head, second := waiter("next/1", now, 10), waiter("head/1", now, 20), waiter("second/1", now, 30)
	nextTok := token()
	if a, err := n.AcquireFair(c, k.lock, k.fence, nextTok, time.Minute, next); err != nil || !a.OK {
		t.Fatalf("AcquireFair alone in the queue: %+v, %v", a, err)
	}
	woken, stop, err := n.Watch(c, node.WaiterChannel(k.lock, head.ID))
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	defer stop()
	others, stopOthers, err := n.Watch(c, node.WaiterChannel(k.lock, second.ID))
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	defer stopOthers()
	drain(woken)
	drain(others)
	// next holds the lock and stays queued until it releases; second arrives
	// before head, but head's ticket is lower: it goes ahead (tickets order
	// waiters).
	for i, w := range []node.Waiter{second, head, second} {
		a, err := n.AcquireFair(c, k.lock, k.fence, token(), time.Minute, w)
		if err != nil || a.OK || a.Queue != node.Queued || a.Clock == 0 {
			t.Fatalf("AcquireFair of %s while held: %+v, %v; want refused, queued, the node's clock", w.ID, a, err)
		}
		if want := 1 + i/2; a.Ahead != want {
			t.Fatalf("AcquireFair of %s: %d waiters ahead, want %d", w.ID, a.Ahead, want)
		}
	}
	// next releases: head is woken (and nobody else), and is the only one
	// granted; a newcomer queued behind it is refused while the lock is free.
	// The head is told whether or not the key's own watchers are (tell).
	ok, queued, err := n.ReleaseFair(c, k.lock, nextTok, next.ID, false)
	must(t, "ReleaseFair", ok, err, true)
	if !queued {
		t.Fatal("ReleaseFair with waiters queued: queued false, want true (the releaser learns the resource is contended)")
	}
	select {
	case <-woken:
	case <-c.Done():
		t.Fatal("the head was not woken")
	}
	if a, err := n.AcquireFair(c, k.lock, k.fence, token(), time.Minute, second); err != nil || a.OK {
		t.Fatalf("AcquireFair of the second waiter, the lock free: %+v, %v; want refused", a, err)
	}
	late := waiter("late/1", now, 40)
	if a, err := n.AcquireFair(c, k.lock, k.fence, token(), time.Minute, late); err != nil || a.OK || a.Queue != node.Queued {
		t.Fatalf("AcquireFair behind the head, the lock free: %+v, %v; want refused and queued", a, err)
	}
	headTok := token()
	if a, err := n.AcquireFair(c, k.lock, k.fence, headTok, time.Minute, head); err != nil || !a.OK {
		t.Fatalf("AcquireFair of the head, the lock free: %+v, %v", a, err)
	}
	for _, id := range []string{late.ID, second.ID} {
		if err := n.LeaveQueue(c, k.lock, id); err != nil {
			t.Fatalf("LeaveQueue: %v", err)
		}
	}
	ok, queued, err = n.ReleaseFair(c, k.lock, headTok, head.ID, true)
	must(t, "ReleaseFair of the head's lock", ok, err, true)
	if queued {
		t.Fatal("ReleaseFair with nobody left queued: queued true, want false")
	}
	select {
	case <-others:
		t.Fatal("a waiter that left was woken")
	default:
	}
}

func (s *suite) ticketBound(t *testing.T, n node.Node, k keys) {
	c := ctx(t)
	if !acquire(t, n, k, token(), time.Minute).OK {
		t.Fatal("Acquire on a fresh key refused")
	}
	now := time.Now().UnixMicro()
	for _, tc := range []struct {
		offset time.Duration
		want   node.QueueState
	}{{-time.Hour, node.TicketRefused}, {time.Hour, node.TicketRefused}, {0, node.Queued}} {
		a, err := n.AcquireFair(c, k.lock, k.fence, token(), time.Minute, waiter("w/"+tc.offset.String(), now, tc.offset.Microseconds()))
		if err != nil || a.OK || a.Queue != tc.want || a.Clock == 0 {
			t.Fatalf("AcquireFair with a ticket %v off: %+v, %v; want %v and the node's clock", tc.offset, a, err, tc.want)
		}
	}
	// A waiter without a ticket is not queued, and learns the clock.
	a, err := n.AcquireFair(c, k.lock, k.fence, token(), time.Minute, waiter("none/1", 0, 0))
	if err != nil || a.OK || a.Queue != node.NotQueued || a.Clock == 0 {
		t.Fatalf("AcquireFair without a ticket: %+v, %v; want not queued, and the node's clock", a, err)
	}
}

func (s *suite) ping(t *testing.T, n node.Node, _ keys) {
	if err := n.Ping(ctx(t)); err != nil {
		t.Fatalf("Ping: %v", err)
	}
}

package sim_test

import (
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/sim"
)

// worldConfig is the deployment of the scripted scenarios: n nodes, clients
// clients, the default TTL (1s, drift allowance 12ms) and node timeout (50ms),
// and a quiet network (one-way delays of 100µs to 1ms, no loss).
func worldConfig(n, clients int) sim.WorldConfig {
	return sim.WorldConfig{
		Seed: 1, Nodes: n, Clients: clients,
		TTL: sim.DefaultTTL, NodeTimeout: sim.DefaultNodeTimeout, DriftFactor: 0.01,
		Links: func(c, n int) sim.LinkFaults {
			return sim.LinkFaults{MinDelay: 100 * time.Microsecond, MaxDelay: time.Millisecond}
		},
		NetLog: true,
	}
}

// withWarmup names the last client W: it takes a warm-up grant.
func withWarmup(cfg sim.WorldConfig) sim.WorldConfig {
	cfg.Names = make([]string, cfg.Clients)
	for c := range cfg.Names {
		cfg.Names[c] = string(rune('A' + c))
	}
	cfg.Names[cfg.Clients-1] = "W"
	return cfg
}

// warmup takes, fences, writes and releases the lock from client c, which
// must reach every node: every node then has a fence counter, as for a
// resource in use.
func warmup(t *testing.T, w *sim.World, c int) {
	t.Helper()
	h := holder(t, w, c)
	g := mustLock(t, h, true)
	h.Write(g, w.Since())
	if err := h.Release(g); err != nil {
		t.Fatalf("warm-up release: %v", err)
	}
	time.Sleep(time.Millisecond)
}

// scenario runs script against a fresh world in a synctest bubble, closes the
// world, checks the history, and logs the timeline (shown with -v or when
// the test fails). A script that cannot construct its scenario stops with
// t.Fatal: the timeline up to there is logged all the same, to show what it
// saw.
func scenario(t *testing.T, cfg sim.WorldConfig, script func(t *testing.T, w *sim.World)) (sim.Report, *sim.History) {
	t.Helper()
	var rep sim.Report
	var h *sim.History
	synctest.Test(t, func(t *testing.T) {
		w := sim.NewWorld(cfg)
		finished := false
		defer func() { // also after t.Fatal in script, which ends the test
			w.Close()
			h = w.History()
			rep = sim.Check(h)
			if !finished {
				t.Logf("the script stopped; so far: %s\n%s%s", rep.Summary(), rep.Details(), h.Timeline())
			}
		}()
		script(t, w)
		finished = true
	})
	t.Logf("%s\n%s%s", rep.Summary(), rep.Details(), h.Timeline())
	return rep, h
}

// synctestRun runs f in a bubble.
func synctestRun(t *testing.T, f func(t *testing.T)) { synctest.Test(t, f) }

func holder(t *testing.T, w *sim.World, c int, opts ...redlock.Option) *sim.Holder {
	t.Helper()
	h, err := w.NewHolder(c, opts...)
	if err != nil {
		t.Fatalf("client %d: %v", c, err)
	}
	return h
}

func mustLock(t *testing.T, h *sim.Holder, eager bool) *sim.Grant {
	t.Helper()
	g, err := h.TryLock(eager)
	if err != nil {
		t.Fatalf("%s: TryLock: %v", h.Name, err)
	}
	return g
}

// lockBy retries TryLock every step until it succeeds or deadline (virtual
// time since the start) passes; it fails the test, with the attempts made
// and the last refusal, if it never does.
func lockBy(t *testing.T, h *sim.Holder, w *sim.World, eager bool, step, deadline time.Duration) *sim.Grant {
	t.Helper()
	var err error
	attempts := 0
	for w.Since() < deadline {
		var g *sim.Grant
		attempts++
		if g, err = h.TryLock(eager); err == nil {
			return g
		}
		time.Sleep(step)
	}
	t.Fatalf("%s never got the lock: %d attempts by %v, the last refused with: %v", h.Name, attempts, deadline, err)
	return nil
}

// sleepTo sleeps until d after the start of the run.
func sleepTo(w *sim.World, d time.Duration) {
	if left := d - w.Since(); left > 0 {
		time.Sleep(left)
	}
}

// cut partitions client c from each of nodes for the whole run.
func cut(w *sim.World, c int, nodes ...int) {
	for _, n := range nodes {
		w.Partition(c, n, sim.Interval{From: 0, To: sim.Forever})
	}
}

type want struct {
	overlaps, leaseOverlaps, stale, unfencedStale, tokenOrder, refusedValid, lateWrites int
}

func (wt want) check(t *testing.T, r sim.Report) {
	t.Helper()
	lease := 0
	for _, o := range r.Overlaps {
		if o.Kind == "lease" {
			lease++
		}
	}
	got := want{len(r.Overlaps), lease, len(r.StaleAccepted), len(r.UnfencedStale), len(r.TokenOrder), len(r.RefusedValid), len(r.LateWrites)}
	if got != wt {
		t.Errorf("got  %+v\nwant %+v", got, wt)
	}
}

// kleppmann is what the Kleppmann scenarios report besides the history.
type kleppmann struct {
	tokA, tokB  uint64
	lateRefused bool
	aStillValid bool
}

// TestKleppmannClientPause is the first scenario of Martin Kleppmann's "How to
// do distributed locking" (2016): client A acquires the lock, checks that it is
// valid, and is paused (a stop-the-world GC) before its write; the lease
// expires; client B acquires the lock and writes; A resumes and writes.
// N = 5, no network fault, tokens from a fresh resource.
//
// Expected outcome (every number is exact: the run is deterministic):
//   - A's token is 1, B's is 2.
//   - The lock service never granted the lock twice (no lease overlap), but A
//     acted inside B's validity window: one "action" overlap, A's write is
//     late (after its validity).
//   - Without fencing, A's stale write would be accepted (the plain register
//     takes it: one unfenced stale write).
//   - The fenced resource refuses it (fence.ErrStale: 1 < 2): no stale write
//     accepted.
func TestKleppmannClientPause(t *testing.T) {
	var k kleppmann
	rep, _ := scenario(t, worldConfig(5, 2), func(t *testing.T, w *sim.World) { clientPause(t, w, &k) })
	if k.tokA != 1 || k.tokB != 2 || !k.lateRefused {
		t.Errorf("tokens A=%d B=%d, A's late write refused=%v; want 1, 2, true", k.tokA, k.tokB, k.lateRefused)
	}
	want{overlaps: 1, unfencedStale: 1, lateWrites: 1}.check(t, rep)
}

func clientPause(t *testing.T, w *sim.World, k *kleppmann) {
	a, b := holder(t, w, 0), holder(t, w, 1)
	ga := mustLock(t, a, true)
	left, ok := a.Check(ga)
	if !ok {
		t.Fatal("A's fresh lock is not valid")
	}
	checked := w.Since()
	done := make(chan *sim.Write)
	go func() {
		a.Pause(ga, left+300*time.Millisecond, "stop-the-world GC, after the check")
		done <- a.Write(ga, checked)
	}()
	sleepTo(w, sim.DefaultTTL+50*time.Millisecond) // A's keys have expired everywhere
	gb := mustLock(t, b, true)
	if _, ok := b.Check(gb); !ok {
		t.Fatal("B's lock is not valid")
	}
	b.Write(gb, w.Since())
	wa := <-done
	_ = b.Release(gb)
	k.tokA, k.tokB, k.lateRefused = ga.Fence, gb.Fence, !wa.Accepted
}

// TestKleppmannClockJump is Kleppmann's second scenario: N = 5; client A
// acquires the lock on nodes 1–3 (nodes 4 and 5 are unreachable from A); node
// 3's clock jumps forward by the TTL, so A's key expires there; client B
// (nodes 1 and 2 unreachable from B) acquires the lock on nodes 3–5. A warm-up
// grant W first gives every node a fence counter (token 1), as a resource in
// use has.
//
// Expected outcome (exact):
//   - Both A and B hold the lock at once: one "lease" overlap, from B's
//     acquisition to A's release. A never notices: its own check says valid.
//   - Fencing still orders them: A's token is 2 and B's is 3 (node 3 carried
//     A's token from its lock window to B's acquisition), so A's write after
//     B's is refused by the fenced resource (a write inside A's own validity:
//     one refused valid write), while the plain register takes it (one
//     unfenced stale write). No stale write accepted.
func TestKleppmannClockJump(t *testing.T) {
	var k kleppmann
	rep, _ := scenario(t, withWarmup(worldConfig(5, 3)), func(t *testing.T, w *sim.World) { clockJump(t, w, &k) })
	if k.tokA != 2 || k.tokB != 3 || !k.lateRefused || !k.aStillValid {
		t.Errorf("tokens A=%d B=%d, A's write refused=%v, A still valid=%v; want 2, 3, true, true", k.tokA, k.tokB, k.lateRefused, k.aStillValid)
	}
	want{overlaps: 1, leaseOverlaps: 1, unfencedStale: 1, refusedValid: 1}.check(t, rep)
}

func clockJump(t *testing.T, w *sim.World, k *kleppmann) {
	warmup(t, w, 2)
	a, b := holder(t, w, 0), holder(t, w, 1)

	cut(w, 0, 3, 4) // A reaches n1, n2, n3
	cut(w, 1, 0, 1) // B reaches n3, n4, n5
	sleepTo(w, 10*time.Millisecond)
	ga := mustLock(t, a, true)
	a.Write(ga, w.Since())

	sleepTo(w, 300*time.Millisecond)
	w.Node(2).Step(sim.DefaultTTL) // n3 jumps forward: A's key is gone there

	sleepTo(w, 400*time.Millisecond)
	gb := mustLock(t, b, true)
	if _, ok := b.Check(gb); !ok {
		t.Fatal("B's lock is not valid")
	}
	b.Write(gb, w.Since())

	sleepTo(w, 500*time.Millisecond)
	_, k.aStillValid = a.Check(ga)
	wa := a.Write(ga, w.Since())
	_ = a.Release(ga)
	_ = b.Release(gb)
	k.tokA, k.tokB, k.lateRefused = ga.Fence, gb.Fence, !wa.Accepted
}

// TestScenariosDeterministic runs scripted scenarios twice: same inputs, same
// timeline, message for message.
func TestScenariosDeterministic(t *testing.T) {
	for name, sc := range map[string]struct {
		cfg    sim.WorldConfig
		script func(*testing.T, *sim.World)
	}{
		"client pause": {worldConfig(5, 2), func(t *testing.T, w *sim.World) { clientPause(t, w, &kleppmann{}) }},
		"clock jump":   {withWarmup(worldConfig(5, 3)), func(t *testing.T, w *sim.World) { clockJump(t, w, &kleppmann{}) }},
	} {
		_, h1 := scenario(t, sc.cfg, sc.script)
		_, h2 := scenario(t, sc.cfg, sc.script)
		if h1.Digest() != h2.Digest() {
			t.Errorf("%s: two runs differ:\n%s\n---\n%s", name, h1.Timeline(), h2.Timeline())
		}
	}
}

// TestSimReplayDeterministic replays random schedules, held and broken: the
// same seed gives the same timeline, message for message, and the same
// verdict with and without the message log.
func TestSimReplayDeterministic(t *testing.T) {
	n := 30
	if testing.Short() {
		n = 10
	}
	for i := 0; i < n; i++ {
		seed := *flagBase + uint64(i)
		p := heldProfile
		if i%2 == 1 {
			p = brokenProfile
		}
		s := sim.Generate(seed, p)
		a, b, quiet := runOne(t, s, true), runOne(t, s, true), runOne(t, s, false)
		if a.History.Digest() != b.History.Digest() {
			t.Errorf("seed %d (%s): two runs differ", seed, p.Name)
		}
		if a.Report.Summary() != quiet.Report.Summary() {
			t.Errorf("seed %d (%s): verdict with the message log %q, without %q", seed, p.Name, a.Report.Summary(), quiet.Report.Summary())
		}
	}
}

var (
	_ = errors.New
	_ = strings.Contains
)

package scenario_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/faults/harness"
	"github.com/redlock-go/redlock/faults/scenario"
)

// modelPhases are the faults of the model scenarios, on a cluster with the
// append-only file (appendfsync always), so that a restarted node comes back
// with every key and fence counter it acknowledged (P5 by persistence; the
// terms, being fence counters, survive too). The victim and the blocker
// rotate over the three nodes:
//
//   - pause: docker pause of the victim, unpaused once the pinned holds
//     ended;
//   - restart: SIGKILL and an immediate start: the victim must come back
//     with the pinned holds;
//   - kill: SIGKILL; the victim stays down to the end of the run (a
//     restart from the append-only file is the restart phase's). A pinned
//     leader is not released: its renewal cannot reach a majority (the
//     victim is down, the blocker never had its key), and it must lose its
//     leadership by itself, at the end of its lease (3 s in that phase).
//
// The kill is last, so that the other phases have three nodes. A
// read-write lock pins a reader (pause, restart) or a writer (kill).
func modelPhases(c *harness.Cluster, m scenario.Model) []scenario.ModelPhase {
	kind := func(rw string) string {
		if m == scenario.RWLock {
			return rw
		}
		return ""
	}
	return []scenario.ModelPhase{
		{Victim: 1, Blocker: 2, What: "docker pause", Kind: kind(scenario.KindRead),
			Fault: c.Node(1).Pause, Heal: c.Node(1).Unpause},
		{Victim: 2, Blocker: 0, What: "SIGKILL and immediate start (AOF)", Kind: kind(scenario.KindRead), Back: true,
			PinTTL: 15 * time.Second, // a restart took up to 5.9 s with two test binaries and other builds beside
			Fault: func() error {
				if err := c.Node(2).Kill(); err != nil {
					return err
				}
				return c.Node(2).Start()
			}},
		{Victim: 0, Blocker: 1, What: "SIGKILL (down to the end)", Kind: kind(scenario.KindWrite),
			Lose: m == scenario.Election, PinTTL: 3 * time.Second, Fault: c.Node(0).Kill},
	}
}

// modelAttempts bounds the runs of a model scenario whose every violation
// came after a step of this host's wall clock (ModelResult.Stepped).
const modelAttempts = 3

// playModel starts a cluster of three nodes with AOF, runs cfg's workload
// on it through the phases and finishes it. A run in which this host's
// wall clock stepped and every violation came after the step broke P2 on
// every node at once and proves nothing: it is run again on a reset
// cluster, up to modelAttempts runs, and the test is skipped, naming P2,
// only if every run saw a step. A violation without a step, or one that
// began before it, fails the test.
func playModel(t *testing.T, cfg scenario.ModelConfig) {
	t.Helper()
	for attempt := 1; attempt <= modelAttempts; attempt++ {
		var stepped bool
		t.Run(fmt.Sprintf("run%d", attempt), func(t *testing.T) {
			cfg := cfg
			cfg.Cluster = harness.Start(t, 3, harness.WithAOF(), harness.WithReuse())
			run := scenario.StartModel(t, cfg)
			for _, ph := range modelPhases(cfg.Cluster, cfg.Model) {
				if err := run.Phase(ph); err != nil {
					t.Error(err)
				}
			}
			res := run.Finish()
			if stepped = res.Stepped; !stepped {
				assert.Zero(t, res.Violations, "%s: violations", cfg.Name)
			}
		})
		if !stepped {
			return
		}
	}
	t.Skipf("%s: this host's wall clock stepped in each of %d runs, each time before every violation seen: P2 broken by the environment (docs/safety.md), nothing proved either way", cfg.Name, modelAttempts)
}

// TestFaultElection: four candidates, each a client of its own, campaign
// for two elections, lead for up to 2 ms and resign; in each phase a leader
// of the first election is pinned while it holds exactly the victim and
// one other node, and the competitors' Campaigns must be refused until it
// resigns (or, in the kill phase, loses its leadership by itself).
// CheckElection: at most one leader at a time, terms strictly increasing
// in the order of takeover, no term twice.
func TestFaultElection(t *testing.T) {
	playModel(t, scenario.ModelConfig{Name: "election", Model: scenario.Election})
}

// TestFaultSemaphore: five clients take permits of two semaphores of two
// permits each (TryAcquire, or Acquire waiting up to 200 ms, half of each;
// some grants must come to waiting calls), hold them for up to 2 ms and release them; in
// each phase both permits of the first are pinned, each holding exactly
// the victim and one other node. CheckSemaphore: never more than two
// holders at once; and, each slot being a lock, never two holders of one
// slot.
func TestFaultSemaphore(t *testing.T) {
	playModel(t, scenario.ModelConfig{Name: "semaphore", Model: scenario.Semaphore, Clients: 5, Permits: 2})
}

// TestFaultRWLock: four clients take read locks (two attempts in three) and
// write locks (TryRLock, TryWLock, or RLock, WLock waiting up to 200 ms:
// half of each, some grants to waiting calls; a writer fences) of two
// resources; in each phase a reader or a writer of the first is pinned. CheckRW: never a
// reader beside a writer, never two writers, writers' tokens in order.
func TestFaultRWLock(t *testing.T) {
	playModel(t, scenario.ModelConfig{Name: "rwlock", Model: scenario.RWLock})
}

// TestFaultModelsRestartEmpty constructs, for each model, what an empty
// restart (no AOF, no quarantine: P5 broken) lets through
// (scenario.ModelCounterexample): two leaders with one term, three holders
// of a semaphore of two permits, a writer beside a reader. The checker must
// see it, every run. For the election, a Campaign that reaches every node
// after the restart is refused (the term's counters are seen lost:
// ErrLockLost, "fence counter missing"), as docs/election.md says it is:
// that refusal is expected and counted; the two leaders need a candidate
// that does not hear from the node that kept the counter, as in the
// simulation (TestSimModelsBroken).
//
// The no-fault subtests check that a construction whose fault does not
// wipe the victim fails, saying what it saw.
func TestFaultModelsRestartEmpty(t *testing.T) {
	c := harness.Start(t, 3, harness.WithReuse())
	for _, m := range []scenario.Model{scenario.Election, scenario.Semaphore, scenario.RWLock} {
		t.Run(string(m)+"/no-fault", func(t *testing.T) {
			out, err := scenario.ModelCounterexample{Model: m, Cluster: c, Resource: fmt.Sprintf("cx-%s-nofault", m),
				What: "nothing", Fault: func() error { return nil }}.Construct(t)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "node 1 did not forget the first holders")
			assert.Contains(t, err.Error(), "holds until")
			require.NotNil(t, out)
			assert.Zero(t, out.Violations)
			t.Logf("as expected: %v", err)
		})
		t.Run(string(m), func(t *testing.T) {
			out := scenario.Demonstrate(t, scenario.ModelCounterexample{Model: m, Cluster: c})
			switch m {
			case scenario.Election:
				require.Len(t, out.Holds, 2, "the first leader and the one cut off from node 0")
				assert.Equal(t, out.Holds[0].Term, out.Holds[1].Term, "the second leader's term")
				assert.Equal(t, 3, out.Violations, "two leaders at once, with one term, the second not above the first")
				require.Len(t, out.Refused, 1, "the Campaign that reaches every node")
				assert.ErrorIs(t, out.Refused[0], redlock.ErrLockLost)
			case scenario.Semaphore:
				require.Len(t, out.Holds, 3)
				assert.NotEqual(t, out.Holds[0].Slot, out.Holds[1].Slot)
				assert.GreaterOrEqual(t, out.Violations, 2, "three holders at once, two of them of one slot")
			case scenario.RWLock:
				require.Len(t, out.Holds, 2)
				assert.Equal(t, 1, out.Violations, "the writer beside the reader")
			}
		})
	}
}

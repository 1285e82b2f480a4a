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
	"github.com/redlock-go/redlock/node"
)

const (
	// shortTTL is the lease of scenarios whose faults are quick to inject.
	shortTTL = 500 * time.Millisecond
	// restartTTL is the lease of the restart scenarios: a SIGKILL and a start
	// take about 0.6s here, and the fault must land well inside the holder's
	// validity for a forgetful node to be able to matter.
	restartTTL = 1500 * time.Millisecond
	// rounds is the number of attacks per scenario.
	rounds = 4
	// gap lets the workload run between rounds.
	gap = 200 * time.Millisecond
)

// play starts the workload, constructs the counterexample cx if given (the
// demonstration of a broken precondition), runs the rounds made by round
// (victim and blocker rotate over the three nodes), and finishes the run.
// It returns the checker's result and the constructed counterexample.
func play(t *testing.T, cfg scenario.Config, cx *scenario.Counterexample, round func(i int, victim, blocker *harness.Node) scenario.Round) (scenario.Result, *scenario.Constructed) {
	t.Helper()
	run := scenario.Start(t, cfg)
	var built *scenario.Constructed
	if cx != nil {
		var err error
		if built, err = run.Counterexample(*cx); err != nil {
			t.Errorf("%s: %v", cfg.Name, err)
		}
	}
	for i := 0; i < rounds; i++ {
		time.Sleep(gap)
		v, b := i%3, (i+1)%3
		rd := round(i, cfg.Cluster.Node(v), cfg.Cluster.Node(b))
		rd.Victim, rd.Blocker = v, b
		if err := run.Round(rd); err != nil {
			t.Errorf("%s: %v", cfg.Name, err)
		}
	}
	// Finish fails the test unless the checker found the constructed
	// overlap (and any stale write accepted, anywhere).
	res := run.Finish()
	if cx != nil {
		assert.Len(t, res.Constructed, 1, "%s: the constructed counterexample's overlap", cfg.Name)
	}
	return res, built
}

// constructedGrants returns the counterexample's grants A and B, failing the
// test if it was not constructed.
func constructedGrants(t *testing.T, built *scenario.Constructed) (a, b *scenario.Grant) {
	t.Helper()
	require.NotNil(t, built, "no counterexample was constructed")
	require.NotNil(t, built.A, "counterexample without A's grant")
	require.NotNil(t, built.B, "counterexample without B's grant")
	return built.A, built.B
}

// TestFaultKill SIGKILLs one node (a minority) while a holder counts on it, and
// starts it again, empty, only once the longest TTL has passed since the kill:
// the delayed restart of docs/safety.md (P5), done by the operator.
func TestFaultKill(t *testing.T) {
	c := harness.Start(t, 3, harness.WithReuse())
	play(t, scenario.Config{Name: "kill", Preconditions: scenario.Held, Cluster: c, TTL: shortTTL}, nil,
		func(i int, victim, _ *harness.Node) scenario.Round {
			var killed time.Time
			return scenario.Round{
				What: "SIGKILL, start after the TTL",
				Fault: func(scenario.Pinned) error {
					killed = time.Now()
					return victim.Kill()
				},
				Heal: func() error {
					time.Sleep(time.Until(killed.Add(shortTTL + 20*time.Millisecond)))
					return victim.Start()
				},
			}
		})
}

// TestFaultPause freezes (docker pause) one node of the holder's majority, a
// minority, in even rounds, and both nodes of its majority, a majority of the
// cluster, in odd rounds; they are unpaused after the holder's lease.
func TestFaultPause(t *testing.T) {
	c := harness.Start(t, 3, harness.WithReuse())
	play(t, scenario.Config{Name: "pause", Preconditions: scenario.Held, Cluster: c, TTL: shortTTL}, nil,
		func(i int, victim, blocker *harness.Node) scenario.Round {
			paused := []*harness.Node{victim}
			if i%2 == 1 {
				third := c.Node(3 - victim.Index() - blocker.Index())
				paused = append(paused, third)
			}
			return scenario.Round{
				What: fmt.Sprintf("docker pause of %d node(s)", len(paused)),
				Fault: func(scenario.Pinned) error {
					for _, n := range paused {
						if err := n.Pause(); err != nil {
							return err
						}
					}
					return nil
				},
				Heal: func() error {
					for _, n := range paused {
						if err := n.Unpause(); err != nil {
							return err
						}
					}
					return nil
				},
			}
		})
}

// TestFaultPartition disconnects one node of the holder's majority from the
// network while it holds, and reconnects it after the lease.
func TestFaultPartition(t *testing.T) {
	c := harness.Start(t, 3, harness.WithReuse())
	play(t, scenario.Config{Name: "partition", Preconditions: scenario.Held, Cluster: c, TTL: shortTTL}, nil,
		func(i int, victim, _ *harness.Node) scenario.Round {
			return scenario.Round{
				What:  "disconnect from the network",
				Fault: func(scenario.Pinned) error { return victim.Disconnect() },
				Heal:  func() error { return victim.Reconnect() },
			}
		})
}

// restartAtOnce is the fault of the restart scenarios: SIGKILL and an
// immediate start, or (odd rounds, with clean) a clean shutdown and start.
func restartAtOnce(i int, victim *harness.Node, clean bool) scenario.Round {
	what := "SIGKILL and immediate start"
	if clean && i%2 == 1 {
		what = "clean shutdown (SIGTERM) and immediate start"
	}
	return scenario.Round{What: what, Fault: func(scenario.Pinned) error {
		if clean && i%2 == 1 {
			return victim.Restart()
		}
		if err := victim.Kill(); err != nil {
			return err
		}
		return victim.Start()
	}}
}

// TestFaultRestartAOF restarts one node of the holder's majority at once
// while it holds, with the append-only file and appendfsync always: the node
// comes back with the holder's key.
func TestFaultRestartAOF(t *testing.T) {
	c := harness.Start(t, 3, harness.WithAOF(), harness.WithReuse())
	play(t, scenario.Config{Name: "restart-aof", Preconditions: scenario.Held, Cluster: c, TTL: restartTTL}, nil,
		func(i int, victim, _ *harness.Node) scenario.Round { return restartAtOnce(i, victim, true) })
}

// TestFaultRestartEmptyDelayed restarts one node of the holder's majority at
// once, without persistence, while the clients enforce the delayed restart:
// node.WithRestartQuarantine(TTL) keeps a node that restarted less than a TTL
// ago out of acquisitions.
func TestFaultRestartEmptyDelayed(t *testing.T) {
	c := harness.Start(t, 3, harness.WithReuse())
	// Fresh nodes (a new cluster's, or those the reset of a reused one
	// started again) are quarantined too (the clients cannot know what they
	// held): let them age past the quarantine, whose uptime reading is
	// conservative by a second, so that the rounds' restarts are what it
	// catches.
	time.Sleep(restartTTL + time.Second)
	play(t, scenario.Config{
		Name: "restart-empty-delayed", Preconditions: scenario.Held, Cluster: c, TTL: restartTTL,
		ClientOptions: []redlock.Option{redlock.WithNodeOptions(node.WithRestartQuarantine(restartTTL))},
	}, nil, func(i int, victim, _ *harness.Node) scenario.Round { return restartAtOnce(i, victim, false) })
}

// TestFaultRestartEmptyImmediate is the same restart without the quarantine:
// the node comes back empty and votes at once, which breaks P5.
//
// The demonstration is constructed (scenario.Counterexample): A holds exactly
// nodes 0 and 1 (a dummy owner holds node 2), node 1 is SIGKILLed and started
// again, empty, node 2 is freed, and B, a client that did not call node 1
// while it was down, acquires nodes 1 and 2 while A's validity has not ended:
// the checker must find that overlap, every run. Fencing detects the wipe:
// node 1 lost the counter that node 2 has, so B gets no token and cannot
// write, and every write of A is accepted (stale_accepted=0).
//
// The rounds then restart each node under a pinned holder, as in the other
// restart scenarios, as a soak of fencing (nothing stale accepted); whether a
// client happens to use the restarted node within the holder's lease is
// timing, so their overlaps are reported, not required. The clients' circuit
// breakers are off: with them, a client whose calls failed while the node
// was down keeps away from it until a probe sees it answer.
func TestFaultRestartEmptyImmediate(t *testing.T) {
	c := harness.Start(t, 3, harness.WithReuse())
	victim := c.Node(1)
	_, built := play(t, scenario.Config{Name: "restart-empty-immediate", Preconditions: scenario.Broken, Cluster: c, TTL: restartTTL,
		ClientOptions: []redlock.Option{redlock.WithBreaker(0)}},
		&scenario.Counterexample{Victim: 1, Blocker: 2, What: "SIGKILL and immediate start, empty", Fault: func() error {
			if err := victim.Kill(); err != nil {
				return err
			}
			return victim.Start()
		}},
		func(i int, victim, _ *harness.Node) scenario.Round { return restartAtOnce(i, victim, false) })
	a, b := constructedGrants(t, built)
	require.Error(t, b.FenceErr, "B got a token from a wiped node and one with a counter")
	assert.Contains(t, b.FenceErr.Error(), "fence counter missing")
	assert.Empty(t, b.Writes, "B wrote without a token")
	require.Len(t, a.Writes, 2, "A writes before the fault and after B's grant")
	for _, w := range a.Writes {
		assert.True(t, w.Accepted, "A's write refused: %v", w.Err)
	}
}

// TestFaultClockJump steps a node's wall clock forward while a holder counts
// on it, which breaks P2: the holder's key there expires at once.
//
// The demonstration is constructed (scenario.Counterexample): A holds exactly
// nodes 0 and 1 with a 30 s lease, node 1's clock steps forward by more than
// the lease, node 2 is freed, and B acquires nodes 1 and 2 while A's validity
// has not ended: the checker must find that overlap, every run. Node 1 kept
// its fence counter (it has no expiry), so B's token is above A's: B's write
// is accepted and A's next write, inside A's validity, is refused as stale.
//
// The rounds then step the victim's clock by 2 × TTL (1 s), cumulatively,
// under a pinned holder, as a soak of fencing; their overlaps are reported,
// not required.
func TestFaultClockJump(t *testing.T) {
	c := harness.Start(t, 3, harness.WithClockJumps(), harness.WithReuse())
	offsets := make([]time.Duration, 3)
	jump := scenario.DefaultCounterexampleLease + time.Second
	_, built := play(t, scenario.Config{Name: "clock-jump", Preconditions: scenario.Broken, Cluster: c, TTL: shortTTL},
		&scenario.Counterexample{Victim: 1, Blocker: 2, What: fmt.Sprintf("wall clock +%v", jump), Fault: func() error {
			offsets[1] += jump
			return c.Node(1).SetClockOffset(offsets[1])
		}},
		func(i int, victim, _ *harness.Node) scenario.Round {
			return scenario.Round{What: fmt.Sprintf("wall clock +%v", 2*shortTTL), Fault: func(scenario.Pinned) error {
				offsets[victim.Index()] += 2 * shortTTL // offsets are absolute: keep going forward
				return victim.SetClockOffset(offsets[victim.Index()])
			}}
		})
	a, b := constructedGrants(t, built)
	require.NoError(t, b.FenceErr, "the step left node 1's counter")
	assert.Greater(t, b.Token, a.Token, "B's token is above A's")
	require.Len(t, b.Writes, 1)
	assert.True(t, b.Writes[0].Accepted, "B's write: %v", b.Writes[0].Err)
	require.Len(t, a.Writes, 2, "A writes before the step and after B's write")
	assert.True(t, a.Writes[0].Accepted, "A's first write: %v", a.Writes[0].Err)
	assert.False(t, a.Writes[1].Accepted, "A's write after B's was accepted")
}

// TestFaultSlow adds latency on the way to and from nodes: first 25ms each way
// on one node, then on two (every majority includes a slow node, so each
// acquisition takes at least 50ms of its validity), then, in the rounds,
// 300ms each way on one node of the holder's majority, so that its calls
// exceed the 500ms node timeout and their SETs land late.
func TestFaultSlow(t *testing.T) {
	c := harness.Start(t, 3, harness.WithReuse())
	cfg := scenario.Config{Name: "slow", Preconditions: scenario.Held, Cluster: c, TTL: shortTTL}
	run := scenario.Start(t, cfg)
	for _, slow := range [][]int{{2}, {1, 2}} {
		for _, i := range slow {
			c.Node(i).SetLatency(25 * time.Millisecond)
		}
		run.Note("latency 25ms each way on nodes %v", slow)
		time.Sleep(1500 * time.Millisecond)
		for _, i := range slow {
			c.Node(i).SetLatency(0)
		}
		run.Note("latency removed")
	}
	for i := 0; i < rounds; i++ {
		time.Sleep(gap)
		v, b := i%3, (i+1)%3
		victim := c.Node(v)
		err := run.Round(scenario.Round{
			Victim: v, Blocker: b, What: "latency 300ms each way",
			Fault: func(scenario.Pinned) error {
				victim.SetLatency(300 * time.Millisecond)
				return nil
			},
			Heal: func() error {
				victim.SetLatency(0)
				return nil
			},
		})
		if err != nil {
			t.Errorf("slow: %v", err)
		}
	}
	run.Finish()
}

// TestCounterexampleFailsLoudly: a counterexample whose fault does not make
// the victim forget the holder's key cannot be constructed, and says so with
// the steps it took, instead of passing, or failing, by chance.
func TestCounterexampleFailsLoudly(t *testing.T) {
	c := harness.Start(t, 3, harness.WithReuse())
	run := scenario.Start(t, scenario.Config{Name: "counterexample-no-fault", Preconditions: scenario.Held, Cluster: c,
		TTL: shortTTL, Acquisitions: 50})
	built, err := run.Counterexample(scenario.Counterexample{Victim: 1, Blocker: 2, What: "nothing",
		Fault: func() error { return nil }, Lease: 2 * time.Second})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "node 1 did not forget A's key while A was valid: it has A's key")
	assert.Contains(t, err.Error(), "A (grant")
	require.NotNil(t, built)
	assert.NotNil(t, built.A)
	assert.Nil(t, built.B, "B acquired although A held its majority")
	res := run.Finish()
	assert.Empty(t, res.Overlaps)
	assert.Empty(t, res.Constructed)
}

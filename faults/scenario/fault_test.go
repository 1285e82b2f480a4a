package scenario_test

import (
	"fmt"
	"testing"
	"time"

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

// play starts the workload, runs the rounds made by round (victim and
// blocker rotate over the three nodes), and finishes the run.
func play(t *testing.T, cfg scenario.Config, round func(i int, victim, blocker *harness.Node) scenario.Round) scenario.Result {
	t.Helper()
	run := scenario.Start(t, cfg)
	for i := 0; i < rounds; i++ {
		time.Sleep(gap)
		v, b := i%3, (i+1)%3
		rd := round(i, cfg.Cluster.Node(v), cfg.Cluster.Node(b))
		rd.Victim, rd.Blocker = v, b
		if err := run.Round(rd); err != nil {
			t.Errorf("%s: %v", cfg.Name, err)
		}
	}
	res := run.Finish()
	if cfg.Preconditions == scenario.Broken && len(res.Overlaps) == 0 {
		t.Errorf("%s: the preconditions were broken in %d rounds but no overlap was seen: the fault did not bite", cfg.Name, rounds)
	}
	return res
}

// TestFaultKill SIGKILLs one node (a minority) while a holder counts on it, and
// starts it again, empty, only once the longest TTL has passed since the kill:
// the delayed restart of docs/safety.md (P5), done by the operator.
func TestFaultKill(t *testing.T) {
	c := harness.Start(t, 3)
	play(t, scenario.Config{Name: "kill", Preconditions: scenario.Held, Cluster: c, TTL: shortTTL},
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
	c := harness.Start(t, 3)
	play(t, scenario.Config{Name: "pause", Preconditions: scenario.Held, Cluster: c, TTL: shortTTL},
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
	c := harness.Start(t, 3)
	play(t, scenario.Config{Name: "partition", Preconditions: scenario.Held, Cluster: c, TTL: shortTTL},
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
	c := harness.Start(t, 3, harness.WithAOF())
	play(t, scenario.Config{Name: "restart-aof", Preconditions: scenario.Held, Cluster: c, TTL: restartTTL},
		func(i int, victim, _ *harness.Node) scenario.Round { return restartAtOnce(i, victim, true) })
}

// TestFaultRestartEmptyDelayed restarts one node of the holder's majority at
// once, without persistence, while the clients enforce the delayed restart:
// node.WithRestartQuarantine(TTL) keeps a node that restarted less than a TTL
// ago out of acquisitions.
func TestFaultRestartEmptyDelayed(t *testing.T) {
	c := harness.Start(t, 3)
	// Fresh nodes are quarantined too (the clients cannot know what they
	// held): let them age past the quarantine, whose uptime reading is
	// conservative by a second, so that the rounds' restarts are what it
	// catches.
	time.Sleep(restartTTL + time.Second)
	play(t, scenario.Config{
		Name: "restart-empty-delayed", Preconditions: scenario.Held, Cluster: c, TTL: restartTTL,
		ClientOptions: []redlock.Option{redlock.WithNodeOptions(node.WithRestartQuarantine(restartTTL))},
	}, func(i int, victim, _ *harness.Node) scenario.Round { return restartAtOnce(i, victim, false) })
}

// TestFaultRestartEmptyImmediate is the same restart without the quarantine:
// the node comes back empty and votes at once, which breaks P5. Overlaps are
// expected. The clients' circuit breakers are off: a client whose calls failed
// while the node was down keeps away from it until a probe sees it answer,
// which here outlasts most holders' leases and hides the broken precondition;
// a client that did not call the node meanwhile would use it at once.
func TestFaultRestartEmptyImmediate(t *testing.T) {
	c := harness.Start(t, 3)
	play(t, scenario.Config{Name: "restart-empty-immediate", Preconditions: scenario.Broken, Cluster: c, TTL: restartTTL,
		ClientOptions: []redlock.Option{redlock.WithBreaker(0)}},
		func(i int, victim, _ *harness.Node) scenario.Round { return restartAtOnce(i, victim, false) })
}

// TestFaultClockJump steps the wall clock of one node of the holder's
// majority forward by twice the TTL while it holds, which breaks P2: the
// holder's key there expires at once. Overlaps are expected.
func TestFaultClockJump(t *testing.T) {
	c := harness.Start(t, 3, harness.WithClockJumps())
	offsets := make([]time.Duration, 3)
	play(t, scenario.Config{Name: "clock-jump", Preconditions: scenario.Broken, Cluster: c, TTL: shortTTL},
		func(i int, victim, _ *harness.Node) scenario.Round {
			return scenario.Round{What: fmt.Sprintf("wall clock +%v", 2*shortTTL), Fault: func(scenario.Pinned) error {
				offsets[victim.Index()] += 2 * shortTTL // offsets are absolute: keep going forward
				return victim.SetClockOffset(offsets[victim.Index()])
			}}
		})
}

// TestFaultSlow adds latency on the way to and from nodes: first 25ms each way
// on one node, then on two (every majority includes a slow node, so each
// acquisition takes at least 50ms of its validity), then, in the rounds,
// 300ms each way on one node of the holder's majority, so that its calls
// exceed the 500ms node timeout and their SETs land late.
func TestFaultSlow(t *testing.T) {
	c := harness.Start(t, 3)
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

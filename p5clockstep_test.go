package redlock_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

// TestP5WallClockStep is TestQuarantineP5Timeline (fresh B) with the wall
// clock stepped forward once n2 restarted and n3 is free, as a VM's clock is
// when the VM is resumed: every redis-server runs under
// faults/harness/faketime.c (LD_PRELOAD), which adds the offset in a file to
// CLOCK_REALTIME only, so that the test's monotonic clock does not see it.
// Without a step B is not granted before A's lease ends; with one of half a
// second or more it is, with n1 (whose copy of A's key expired early) and n3,
// and n2 too once the step exceeds the quarantine: docs/safety.md's P2
// (node clocks do not jump forward) is the timeline's premise, and
// wallClockWatch, by which TestQuarantineP5Timeline tells such a run from a
// second holder, sees every step that let B in. It needs gcc; -short skips
// it (about 12 s).
func TestP5WallClockStep(t *testing.T) {
	if testing.Short() {
		t.Skip("12 s of real-time steps")
	}
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("needs gcc to build faults/harness/faketime.c")
	}
	const (
		ttl        = 2 * time.Second
		quarantine = 3 * time.Second
	)
	dir := t.TempDir()
	so := filepath.Join(dir, "faketime-offset.so")
	out, err := exec.Command(gcc, "-shared", "-fPIC", "-O2", "-o", so, filepath.Join("faults", "harness", "faketime.c")).CombinedOutput()
	require.NoError(t, err, "%s", out)
	offset := filepath.Join(dir, "offset")
	require.NoError(t, os.WriteFile(offset, []byte("0"), 0o644))
	t.Setenv("LD_PRELOAD", so) // the redis-servers started below inherit both
	t.Setenv("REDLOCK_CLOCK_OFFSET_FILE", offset)

	// Two steps in the default mode (about 6 s each: the uptime the
	// quarantine needs first, then a TTL): none, and one that lets B in.
	// The adversary's run also had 0.5 s and 5 s, and fair mode: the same.
	for _, step := range []time.Duration{0, 1500 * time.Millisecond} {
		for _, fair := range []bool{false} {
			t.Run(fmt.Sprintf("step=%v/fair=%t", step, fair), func(t *testing.T) {
				require.NoError(t, os.WriteFile(offset, []byte("0"), 0o644))
				servers := redistest.StartN(t, 3)
				for _, s := range servers {
					s.WaitUptime(quarantine + time.Second)
				}
				wallStep := wallClockWatch(t, servers[0])
				ctx := ctxT(t, 30*time.Second)
				const resource = "p5"
				key := redlock.LockKey(redlock.DefaultKeyPrefix, resource)
				_, err := servers[2].Do("SET", key, "someone-else", "PX", 60000)
				require.NoError(t, err)
				opts := []redlock.Option{redlock.WithTTL(ttl), redlock.WithRetryBackoff(5*time.Millisecond, 20*time.Millisecond),
					redlock.WithNodeOptions(node.WithRestartQuarantine(quarantine)), redlock.WithBreaker(0)}
				if fair {
					opts = append(opts, redlock.WithFair())
				}
				a := dialed(t, servers, opts...)
				held, err := a.Lock(ctx, resource)
				require.NoError(t, err)
				heldEverywhere(t, servers[:2], key)
				servers[1].Kill()
				servers[1].Restart()
				_, err = servers[2].Do("DEL", key)
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(offset, []byte(fmt.Sprint(step.Milliseconds())), 0o644))

				bctx, cancel := context.WithDeadline(ctx, held.Until())
				defer cancel()
				b := dialed(t, servers, opts...)
				l, err := b.Lock(bctx, resource)
				d := wallStep()
				if err != nil {
					require.ErrorIs(t, bctx.Err(), context.DeadlineExceeded, "B's Lock ended early: %v", err)
					t.Logf("step %v (seen: %v): B not granted before A's lease ended", step, d)
					return
				}
				left := time.Until(held.Until())
				holds := ""
				for i, s := range servers {
					v, _ := redis.String(s.Do("GET", key))
					holds += fmt.Sprintf(" n%d:%t", i+1, v == l.Token())
				}
				_ = l.Release(context.Background())
				t.Logf("step %v (seen: %v): B granted %v before A's lease ended; B's token on%s", step, d, left, holds)
				require.NotZero(t, step, "B granted without a step")
				require.Greater(t, d, wallStepTolerance, "a step let B in, and wallClockWatch missed it")
			})
		}
	}
}

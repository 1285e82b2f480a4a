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
// it (about 12 s of waiting; the two steps and the package's other waiting
// tests run side by side: the servers get the library through their own
// environment, not the test binary's).
func TestP5WallClockStep(t *testing.T) {
	if testing.Short() {
		t.Skip("12 s of real-time steps")
	}
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("needs gcc to build faults/harness/faketime.c")
	}
	t.Parallel()
	const (
		ttl        = 2 * time.Second
		quarantine = 3 * time.Second
	)
	dir := t.TempDir()
	so := filepath.Join(dir, "faketime-offset.so")
	out, err := exec.Command(gcc, "-shared", "-fPIC", "-O2", "-o", so, filepath.Join("faults", "harness", "faketime.c")).CombinedOutput()
	require.NoError(t, err, "%s", out)

	// Two steps in the default mode (about 6 s each: the uptime the
	// quarantine needs first, then a TTL): none, and one that lets B in.
	// The adversary's run also had 0.5 s and 5 s, and fair mode: the same.
	for _, step := range []time.Duration{0, 1500 * time.Millisecond} {
		t.Run(fmt.Sprintf("step=%v", step), func(t *testing.T) {
			t.Parallel()
			offset := filepath.Join(t.TempDir(), "offset")
			require.NoError(t, os.WriteFile(offset, []byte("0"), 0o644))
			// Every redis-server of this subtest runs under the library, reading
			// this subtest's offset file.
			env := []string{"LD_PRELOAD=" + so, "REDLOCK_CLOCK_OFFSET_FILE=" + offset}
			p := startP5(t, false, ttl, quarantine, env...)
			servers, held, ctx, key := p.servers, p.held, p.ctx, p.key
			p.restartN2(t)
			require.NoError(t, os.WriteFile(offset, []byte(fmt.Sprint(step.Milliseconds())), 0o644))

			bctx, cancel := context.WithDeadline(ctx, held.Until())
			defer cancel()
			b := dialed(t, servers, p.opts...)
			l, err := b.Lock(bctx, p5Resource)
			d := p.wallStep()
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

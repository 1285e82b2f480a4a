package stall_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/internal/stall"
)

// A process kept from running is seen as a stall. (That an idle wait is
// not is logged, not asserted: on a loaded machine the meter's own
// goroutine waits for a CPU, and that is a stall too.)
func TestMeterSeesAStopTheWorld(t *testing.T) {
	m := stall.Start(time.Millisecond)
	defer m.Stop()
	start := time.Now()
	time.Sleep(30 * time.Millisecond) // a wait: the meter goes on running
	quiet := m.Since(start)

	// Stop the world: every goroutine, the meter's too, waits for it.
	before := time.Now()
	runtime.GC() // warms up; the stop below is what is measured
	stopped := stopTheWorld(t, 60*time.Millisecond)
	seen := m.Since(before)
	t.Logf("quiet %v; stopped %v, seen %v", quiet, stopped, seen)
	assert.GreaterOrEqual(t, seen, stopped/2, "the stop is seen")
	assert.Positive(t, m.Max()) // the runtime preempts the spin every 10 ms or so: one stall is shorter
	assert.Zero(t, m.Since(time.Now().Add(time.Hour)), "nothing after the future")
}

// stopTheWorld holds every other goroutine off the CPU for about d, by
// asking the runtime for one P and spinning while the meter's goroutine
// cannot be scheduled; it returns how long the spin lasted.
func stopTheWorld(t *testing.T, d time.Duration) time.Duration {
	t.Helper()
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := time.Now()
	for time.Since(start) < d { // no function call that yields: Go preempts
		// asynchronously after 10 ms, so the meter still runs now and then
	}
	took := time.Since(start)
	require.GreaterOrEqual(t, took, d)
	return took
}

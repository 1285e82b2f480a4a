package redlock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// nodeClock keeps the least late reading of the nodes' clock: a reading
// noted late (its goroutine not scheduled at once) would make this
// client's tickets early, and buy it places ahead of the waiters queued
// just before it.
func TestNodeClockKeepsTheLeastLateReading(t *testing.T) {
	const c0 = int64(1_700_000_000_000_000) // the nodes' clock, µs
	at := func(d time.Duration) time.Time { return monoBase.Add(time.Hour + d) }
	us := func(d time.Duration) int64 { return d.Microseconds() }
	type reading struct {
		clock int64
		at    time.Duration
	}
	for _, tc := range []struct {
		name     string
		readings []reading
		now      time.Duration
		want     int64 // the ticket at now; 0: none
	}{
		{"one reading", []reading{{c0, 0}}, 2 * time.Millisecond, c0 + us(2*time.Millisecond)},
		{"a later reading noted 900µs late is not kept",
			[]reading{{c0, 0}, {c0 + us(100*time.Microsecond), time.Millisecond}},
			2 * time.Millisecond, c0 + us(2*time.Millisecond)},
		{"a later reading that puts the clock further on is kept at once",
			[]reading{{c0, 0}, {c0 + us(1500*time.Microsecond), time.Millisecond}},
			2 * time.Millisecond, c0 + us(2500*time.Microsecond)},
		{"a late reading is kept once the kept one is older than nodeClockBest (a clock stepped back)",
			[]reading{{c0, 0}, {c0 - us(500*time.Millisecond), nodeClockBest + time.Millisecond}},
			nodeClockBest + 2*time.Millisecond, c0 - us(500*time.Millisecond) + us(time.Millisecond)},
		{"but not before",
			[]reading{{c0, 0}, {c0 - us(500*time.Millisecond), nodeClockBest - time.Millisecond}},
			nodeClockBest, c0 + us(nodeClockBest)},
		{"an unknown clock changes nothing",
			[]reading{{c0, 0}, {0, time.Millisecond}},
			2 * time.Millisecond, c0 + us(2*time.Millisecond)},
		{"a reading not kept keeps the clock fresh",
			[]reading{{c0, 0}, {c0, 50 * time.Millisecond}},
			50*time.Millisecond + nodeClockFresh - time.Millisecond, c0 + us(50*time.Millisecond+nodeClockFresh-time.Millisecond)},
		{"stale once nodeClockFresh passed since the last reading",
			[]reading{{c0, 0}, {c0, 50 * time.Millisecond}},
			50*time.Millisecond + nodeClockFresh + time.Millisecond, 0},
		{"never read", nil, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var k nodeClock
			for _, r := range tc.readings {
				k.learn(r.clock, at(r.at))
			}
			assert.Equal(t, tc.want, k.ticket(at(tc.now)))
		})
	}
}

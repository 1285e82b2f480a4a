// Package stall measures how long this process was kept from running, as
// the lateness of a goroutine that wakes at a fixed period. Tests that bound
// a call's wall time add the stall seen while the call ran, so that a machine
// that starves the whole process (other processes on two cores, the race
// detector) does not pass for a call that outlived its deadline, while a call
// that waits past its deadline on a quiet process is still caught: its wait
// does not delay the meter.
package stall

import (
	"sync"
	"time"
)

// Meter records the stalls of its goroutine since Start. The zero value is
// not usable.
type Meter struct {
	period time.Duration
	stop   chan struct{}
	done   chan struct{}

	mu     sync.Mutex
	stalls []stall
}

// stall is a wake-up that came late: at is when it came, late by how much.
type stall struct {
	at   time.Time
	late time.Duration
}

// minLate is the smallest lateness recorded: timer slack is not a stall.
const minLate = 2 * time.Millisecond

// Start starts a meter waking every period (5 ms if period ≤ 0).
func Start(period time.Duration) *Meter {
	if period <= 0 {
		period = 5 * time.Millisecond
	}
	m := &Meter{period: period, stop: make(chan struct{}), done: make(chan struct{})}
	go m.run()
	return m
}

func (m *Meter) run() {
	defer close(m.done)
	t := time.NewTimer(m.period)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-m.stop:
			return
		case now := <-t.C:
			now = time.Now() // when this goroutine ran, not when the timer fired
			if late := now.Sub(last) - m.period; late >= minLate {
				m.mu.Lock()
				m.stalls = append(m.stalls, stall{now, late})
				m.mu.Unlock()
			}
			last = now
			t.Reset(m.period)
		}
	}
}

// Stop stops the meter; Since still answers for what it saw.
func (m *Meter) Stop() {
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	<-m.done
}

// Since returns the total lateness of the wake-ups that came after t: how
// long, at least, the process was kept from running since t (a stall that
// began before t and ended after it counts whole).
func (m *Meter) Since(t time.Time) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	var total time.Duration
	for i := len(m.stalls) - 1; i >= 0 && m.stalls[i].at.After(t); i-- {
		total += m.stalls[i].late
	}
	return total
}

// Max returns the longest single stall seen so far.
func (m *Meter) Max() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	var longest time.Duration
	for _, s := range m.stalls {
		longest = max(longest, s.late)
	}
	return longest
}

// Package clock is time as the Redlock algorithm sees it: a monotonic Clock, the
// drift allowance that covers clock-rate differences between the client and the
// Redis nodes, and the validity left to a lock after an acquisition took some time.
//
// Every duration the algorithm reasons about is a difference of two readings of the
// same monotonic clock; wall-clock time only appears in the Until values handed to
// users, derived from a monotonic reading.
package clock

import (
	"sync"
	"time"
)

// MinDrift is the constant part of the drift allowance. It covers the resolution of
// Redis' expiry clock (milliseconds) and the rounding of PX to whole milliseconds.
const MinDrift = 2 * time.Millisecond

// DefaultDriftFactor is the fraction of the TTL reserved for the clock of a Redis
// node running faster than the client's: 1%, i.e. a 10 s lease tolerates a node
// whose clock runs up to 1% fast relative to the client over those 10 s.
const DefaultDriftFactor = 0.01

// Clock reads the current time. Implementations must return readings whose
// differences are monotonic (time.Now carries a monotonic reading; Fake is manual).
type Clock interface {
	Now() time.Time
}

// Real returns the system clock. Differences of its readings use Go's monotonic
// clock, so wall-clock steps (NTP, manual changes) do not affect elapsed times.
func Real() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Fake is a Clock that moves only when told to. Its zero value starts at the zero
// time; it is safe for concurrent use.
type Fake struct {
	mu  sync.Mutex
	now time.Time
}

// NewFake returns a Fake clock reading start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

// Now returns the fake clock's current reading.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Advance moves the fake clock forward by d. A negative d is ignored: the clock is
// monotonic.
func (f *Fake) Advance(d time.Duration) {
	if d <= 0 {
		return
	}
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

// Drift returns the drift allowance for a lease of ttl: ttl·factor + MinDrift,
// rounded up to a whole nanosecond so that the allowance is never understated.
func Drift(ttl time.Duration, factor float64) time.Duration {
	d := time.Duration(float64(ttl) * factor)
	if float64(d) < float64(ttl)*factor {
		d++
	}
	return d + MinDrift
}

// Validity returns what is left of a lease of ttl once elapsed has passed between
// sending the first request and deciding the outcome: ttl − elapsed − Drift(ttl,
// factor). A result ≤ 0 means the lease cannot be trusted at all.
func Validity(ttl, elapsed time.Duration, factor float64) time.Duration {
	return ttl - elapsed - Drift(ttl, factor)
}

// Remaining returns the validity left at now of a lease whose request was sent at
// start; it is Validity with elapsed = now − start, measured on the monotonic clock.
func Remaining(ttl time.Duration, factor float64, start, now time.Time) time.Duration {
	return Validity(ttl, now.Sub(start), factor)
}

package clock_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/clock"
)

func TestDrift(t *testing.T) {
	tests := []struct {
		name   string
		ttl    time.Duration
		factor float64
		want   time.Duration
	}{
		{"default factor 10s", 10 * time.Second, clock.DefaultDriftFactor, 100*time.Millisecond + clock.MinDrift},
		{"zero factor keeps the constant", time.Second, 0, clock.MinDrift},
		{"tiny ttl", 3 * time.Millisecond, 0.01, 30*time.Microsecond + clock.MinDrift},
		{"rounds up", 1, 0.5, 1 + clock.MinDrift},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, clock.Drift(tt.ttl, tt.factor))
		})
	}
}

func TestValidity(t *testing.T) {
	tests := []struct {
		name    string
		ttl     time.Duration
		elapsed time.Duration
		want    time.Duration
	}{
		{"instant", 10 * time.Second, 0, 10*time.Second - 102*time.Millisecond},
		{"slow acquisition", 10 * time.Second, 3 * time.Second, 7*time.Second - 102*time.Millisecond},
		{"exactly used up", time.Second, 988 * time.Millisecond, 0},
		{"too late", time.Second, time.Second, -12 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, clock.Validity(tt.ttl, tt.elapsed, clock.DefaultDriftFactor))
		})
	}
}

func TestRemainingUsesClockDifference(t *testing.T) {
	f := clock.NewFake(time.Unix(1000, 0))
	start := f.Now()
	f.Advance(400 * time.Millisecond)
	assert.Equal(t, 600*time.Millisecond-12*time.Millisecond,
		clock.Remaining(time.Second, clock.DefaultDriftFactor, start, f.Now()))
}

func TestFakeIsMonotonicAndConcurrent(t *testing.T) {
	var f clock.Fake // zero value is usable
	start := f.Now()
	f.Advance(-time.Hour)
	require.Equal(t, start, f.Now(), "negative advance must not move the clock back")

	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 100; j++ {
				f.Advance(time.Millisecond)
				_ = f.Now()
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, 800*time.Millisecond, f.Now().Sub(start))
}

func TestRealIsMonotonic(t *testing.T) {
	c := clock.Real()
	a := c.Now()
	b := c.Now()
	assert.False(t, b.Before(a))
}

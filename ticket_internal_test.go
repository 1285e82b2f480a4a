package redlock

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/redistest"
)

// A client whose clock is wrong buys no place in the waiters' queues: of 8
// separate clients contending for one key (hold 0), whose clocks (where the
// client reads one for a waiter's ticket: c.ticketNow) run an hour behind,
// an hour ahead, 0.9 s behind and 0.5 s ahead, none gets much more or less
// than the others. When tickets were the clients' clocks, the client an hour
// behind got 85 of 87 grants, and one 0.9 s behind 5 times the others'.
func TestWrongClockBuysNoPlace(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opts     []Option
		fairness float64
	}{
		{"default", nil, 0.5},
		{"fair", []Option{WithFair()}, 0.8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			servers := redistest.StartN(t, 3)
			const clients = 8
			skew := map[int]time.Duration{0: -time.Hour, 1: time.Hour, 2: -900 * time.Millisecond, 3: 500 * time.Millisecond}
			cs := make([]*Client, clients)
			for i := range cs {
				c, err := Dial(redistest.URLs(servers), tc.opts...)
				require.NoError(t, err)
				t.Cleanup(func() { c.Close() })
				if d, ok := skew[i]; ok {
					c.ticketNow = func() time.Time { return time.Now().Add(d) }
				}
				cs[i] = c
			}
			grants := contend(t, cs, "tickets", 3*time.Second)
			t.Logf("grants per client (clocks 0: an hour behind, 1: an hour ahead, 2: 0.9 s behind, 3: 0.5 s ahead): %v", grants)
			lo, hi := slices.Min(grants), slices.Max(grants)
			require.Positive(t, hi)
			assert.GreaterOrEqual(t, float64(lo)/float64(hi), tc.fairness, "fewest/most grants: %v", grants)
		})
	}
}

// contend runs Lock and Release of resource in a loop on every client until
// d has passed, and returns each client's grants.
func contend(t *testing.T, cs []*Client, resource string, d time.Duration) []int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	grants := make([]int, len(cs))
	var wg sync.WaitGroup
	var holders atomic.Int32
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				l, err := c.Lock(ctx, resource)
				if err != nil {
					if ctx.Err() == nil || !errors.Is(err, ErrNotAcquired) {
						assert.ErrorIs(t, err, ErrNotAcquired)
					}
					return
				}
				assert.Equal(t, int32(1), holders.Add(1), "two holders")
				grants[i]++
				holders.Add(-1)
				assert.NoError(t, l.Release(context.Background()))
			}
		}()
	}
	wg.Wait()
	return grants
}

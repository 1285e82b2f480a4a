package node

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// TestMuxSingleFlightDial: callers of a slot share one dial at a time, wait for
// it only until their own deadline, and Close cuts the dial short.
func TestMuxSingleFlightDial(t *testing.T) {
	var dials, inDial, maxInDial atomic.Int64
	dial := func(ctx context.Context) (redis.Conn, error) {
		dials.Add(1)
		n := inDial.Add(1)
		defer inDial.Add(-1)
		for m := maxInDial.Load(); n > m && !maxInDial.CompareAndSwap(m, n); m = maxInDial.Load() {
		}
		<-ctx.Done() // a node that never answers the connect
		return nil, ctx.Err()
	}
	m := newMux(2, 300*time.Millisecond, 2*time.Second, dial)
	var wg sync.WaitGroup
	var late atomic.Int64
	end := time.Now().Add(time.Second)
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				start := time.Now()
				if _, err := m.do(ctx, callMode{}, "PING"); err == nil {
					t.Error("PING succeeded")
				}
				if time.Since(start) > 500*time.Millisecond {
					late.Add(1)
				}
				cancel()
			}
		}()
	}
	wg.Wait()
	t.Logf("%d dials for 2 slots in 1s (dial timeout 300ms), at most %d at once; %d calls late", dials.Load(), maxInDial.Load(), late.Load())
	if got := maxInDial.Load(); got > 2 {
		t.Errorf("%d dials at once for 2 slots", got)
	}
	if got := dials.Load(); got > 2*(1000/300+2) {
		t.Errorf("%d dials in 1s", got)
	}
	if late.Load() > 0 {
		t.Errorf("%d calls waited past their deadline", late.Load())
	}
	// A dial in progress when the node is closed ends at once.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	_, _ = m.do(ctx, callMode{}, "PING")
	cancel()
	start := time.Now()
	m.close()
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("close took %v", d)
	}
	if inDial.Load() != 0 {
		t.Error("a dial outlived close")
	}
}

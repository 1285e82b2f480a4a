package redlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/redistest"
)

// Close while a Lock call's attempt waits for a paused node (the two others
// split) returns within about the node timeout.
func TestCloseDuringSplitAttempt(t *testing.T) {
	t.Parallel() // mostly waits (leases, quarantines, restarts): beside the others that do, once the package's other tests are done
	servers := redistest.StartN(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	other, err := redlock.Dial([]string{servers[1].URL()})
	require.NoError(t, err)
	defer other.Close()
	_, err = other.TryLock(ctx, "closewait") // held on B only
	require.NoError(t, err)
	for _, fair := range []bool{false, true} {
		t.Run(fmt.Sprintf("fair=%v", fair), func(t *testing.T) {
			const nodeTimeout = time.Second
			opts := []redlock.Option{redlock.WithNodeTimeout(nodeTimeout), redlock.WithBreaker(0), redlock.WithRetryBackoff(time.Millisecond, 5*time.Millisecond)}
			if fair {
				opts = append(opts, redlock.WithFair())
			}
			c, err := redlock.Dial(redistest.URLs(servers), opts...)
			require.NoError(t, err)
			_, _ = c.TryLock(ctx, "warm") // connect everywhere
			servers[2].Pause()
			defer servers[2].Resume()
			done := make(chan error, 1)
			go func() { _, err := c.Lock(ctx, "closewait"); done <- err }()
			time.Sleep(1500 * time.Millisecond)
			start := time.Now()
			require.NoError(t, c.Close())
			elapsed := time.Since(start)
			t.Logf("Close took %v (node timeout %v); Lock: %v", elapsed, nodeTimeout, <-done)
			servers[2].Resume()
		})
	}
}

package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/redistest"
)

// TestCloseBetweenAttempts: Close landing after a waiting call's wait ended
// and before its next attempt began (the moment CI's run y8 of 5 December
// met in TestRWCloseEndsWaiters) ends the call with an error wrapping both
// ErrNotAcquired and ErrClosed, as Close's doc promises, not with the bare
// ErrClosed of the attempt's begin. The moment is constructed: the next
// attempt starts only once the client is closed.
func TestCloseBetweenAttempts(t *testing.T) {
	servers := redistest.StartN(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	holder, err := Dial(redistest.URLs(servers))
	require.NoError(t, err)
	defer holder.Close()

	check := func(t *testing.T, err error) {
		t.Helper()
		require.Error(t, err)
		assert.ErrorIs(t, err, ErrNotAcquired)
		assert.ErrorIs(t, err, ErrClosed)
		var qe *QuorumError
		assert.True(t, errors.As(err, &qe), "a *QuorumError: %v", err)
	}

	for _, kind := range []string{"RLock", "WLock"} {
		t.Run(kind, func(t *testing.T) {
			res := "cb-" + kind
			w, err := holder.WLock(ctx, res)
			require.NoError(t, err)
			defer w.Release(ctx)
			c, err := Dial(redistest.URLs(servers), WithRetryBackoff(time.Millisecond, 5*time.Millisecond))
			require.NoError(t, err)
			defer c.Close()
			lc, err := c.rwConfig(ctx, res, nil, kind == "RLock")
			require.NoError(t, err)
			writer := ""
			if kind == "WLock" {
				writer = "cb-writer"
			}
			if kind == "RLock" {
				_, err = rwLoop(ctx, c, res, lc, writer, closeBefore2nd(c, c.tryRead))
			} else {
				_, err = rwLoop(ctx, c, res, lc, writer, closeBefore2nd(c, c.tryWrite))
			}
			check(t, err)
		})
	}

	t.Run("Lock", func(t *testing.T) {
		l, err := holder.Lock(ctx, "cb-lock")
		require.NoError(t, err)
		defer l.Release(ctx)
		c, err := Dial(redistest.URLs(servers), WithRetryBackoff(time.Millisecond, 5*time.Millisecond))
		require.NoError(t, err)
		defer c.Close()
		lc, err := c.lockConfig("cb-lock", nil)
		require.NoError(t, err)
		w := &waiting{c: c, resource: "cb-lock", lc: lc}
		defer w.stop()
		got, _, err := w.attempt(ctx) // refused: it queues and listens
		require.Nil(t, got)
		require.NoError(t, err)
		go c.Close()
		<-c.stop
		got, again, err := w.attempt(ctx)
		require.Nil(t, got)
		assert.False(t, again, "no attempt after Close")
		check(t, err)
	})
}

// TestOneShotCallsAfterClose: the one-shot calls on a closed client return
// the bare ErrClosed, not an ErrNotAcquired a caller's own retry loop would
// take for a refusal and retry forever (only the waiting calls' error wraps
// both: TestCloseBetweenAttempts).
func TestOneShotCallsAfterClose(t *testing.T) {
	servers := redistest.StartN(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(redistest.URLs(servers))
	require.NoError(t, err)
	require.NoError(t, c.Close())
	calls := map[string]func() error{
		"TryLock":  func() error { _, err := c.TryLock(ctx, "oneshot"); return err },
		"TryRLock": func() error { _, err := c.TryRLock(ctx, "oneshot"); return err },
		"TryWLock": func() error { _, err := c.TryWLock(ctx, "oneshot"); return err },
	}
	for name, call := range calls {
		err := call()
		assert.ErrorIs(t, err, ErrClosed, name)
		assert.NotErrorIs(t, err, ErrNotAcquired, name)
	}
}

// closeBefore2nd wraps an attempt function: its second call closes the
// client first (from another goroutine: Close waits for the call to end)
// and makes the attempt once the client is closed.
func closeBefore2nd[T any](c *Client, try func(context.Context, string, lockConfig, string) (T, error)) func(context.Context, string, lockConfig, string) (T, error) {
	calls := 0
	return func(ctx context.Context, resource string, lc lockConfig, writer string) (T, error) {
		calls++
		if calls == 2 {
			go c.Close()
			<-c.stop
		}
		return try(ctx, resource, lc, writer)
	}
}

package redlock

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRoundContextLazyDone checks the round's context, whose Done channel and
// deadline timer are made only when Done is first asked for: it must behave
// as a context.WithTimeout would whichever way it is used.
func TestRoundContextLazyDone(t *testing.T) {
	newRR := func(d time.Duration) *roundRunner[int] {
		return &roundRunner[int]{values: context.Background(), deadline: time.Now().Add(d)}
	}
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	awaitClosed := func(t *testing.T, ch <-chan struct{}) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal("Done was not closed")
		}
	}

	// early reports whether the checks of a context not ended yet still
	// run before its deadline (a machine under load may stall the test).
	const d = 200 * time.Millisecond
	early := func(start time.Time) bool { return time.Since(start) < d/2 }
	t.Run("never asked: Err past the deadline", func(t *testing.T) {
		start := time.Now()
		rr := newRR(d)
		err := rr.Err()
		if early(start) {
			require.NoError(t, err)
		}
		time.Sleep(d) // the deadline itself is what is tested: no signal to await
		require.ErrorIs(t, rr.Err(), context.DeadlineExceeded)
		assert.True(t, closed(rr.Done()), "Done asked after the deadline must be closed")
	})
	t.Run("asked before the deadline: closes at it", func(t *testing.T) {
		start := time.Now()
		rr := newRR(d)
		ch := rr.Done()
		isClosed, err := closed(ch), rr.Err()
		if early(start) {
			require.False(t, isClosed)
			require.NoError(t, err)
		}
		awaitClosed(t, ch)
		assert.ErrorIs(t, rr.Err(), context.DeadlineExceeded)
		assert.Equal(t, ch, rr.Done(), "one channel")
	})
	t.Run("settled before asked", func(t *testing.T) {
		rr := newRR(time.Hour)
		rr.Settled()
		assert.ErrorIs(t, rr.Err(), context.Canceled)
		assert.True(t, closed(rr.Done()))
		assert.Nil(t, rr.timer, "no timer for an ended context")
	})
	t.Run("asked, then settled", func(t *testing.T) {
		rr := newRR(time.Hour)
		ch := rr.Done()
		rr.Settled()
		awaitClosed(t, ch)
		assert.ErrorIs(t, rr.Err(), context.Canceled)
		assert.False(t, rr.timer.Stop(), "the timer is stopped when the context ends")
	})
	t.Run("asked at once by many", func(t *testing.T) {
		rr := newRR(time.Hour)
		chans := make([]<-chan struct{}, 8)
		var wg sync.WaitGroup
		for i := range chans {
			wg.Go(func() { chans[i] = rr.Done() })
		}
		wg.Wait()
		for _, ch := range chans {
			assert.Equal(t, chans[0], ch)
		}
		rr.Settled()
		awaitClosed(t, chans[0])
	})
	t.Run("an expired context reads as one", func(t *testing.T) {
		rr := newRR(-time.Millisecond)
		ctx, cancel := context.WithTimeout(rr, time.Hour) // a child sees the parent ended
		defer cancel()
		awaitClosed(t, ctx.Done())
		assert.ErrorIs(t, ctx.Err(), context.DeadlineExceeded)
	})
}

package redlock

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// forward passes on a node's release notifications and grant announcements
// in their order: an announcement after a release makes the woken waiter drop
// its attempt (stagger reports it); one before the release is dropped.
func TestForwardOrdersAnnouncements(t *testing.T) {
	for _, c := range []struct {
		name      string
		takenLast bool
	}{{"taken after the release", true}, {"taken before the release", false}} {
		t.Run(c.name, func(t *testing.T) {
			rw := &releaseWatch{notify: make(chan struct{}, 1), taken: make(chan struct{}, 1), done: make(chan struct{}), noted: make([]atomic.Bool, 1)}
			released, taken := make(chan struct{}, 1), make(chan struct{}, 1)
			stopped := make(chan struct{})
			go func() { rw.forward(0, released, taken); close(stopped) }()
			if !c.takenLast {
				taken <- struct{}{}
				require.Eventually(t, func() bool { return len(taken) == 0 }, testWait, testTick)
			}
			released <- struct{}{}
			<-rw.notify // woken
			if c.takenLast {
				taken <- struct{}{}
				require.Eventually(t, func() bool { return len(rw.taken) == 1 }, testWait, testTick)
			}
			dropped, err := stagger(context.Background(), 0, rw.taken)
			require.NoError(t, err)
			require.Equal(t, c.takenLast, dropped)
			close(rw.done)
			<-stopped
		})
	}
}

const (
	testWait = 5 * time.Second
	testTick = time.Millisecond
)

// A fair waiter whose attempts some nodes grant and others refuse retries
// within fairRetry a few times in a row, then backs off as usual: nodes that
// keep disagreeing have a head that is not trying, and a millisecond loop
// would only load them. Behind others, it waits for its wake-up.
func TestFairPace(t *testing.T) {
	lc := lockConfig{retryMin: 4 * time.Millisecond, retryMax: 250 * time.Millisecond}
	partial := &QuorumError{Agreed: 1}
	p := pace{queued: true}
	for i := range fairSoonMax {
		p.failed(nil, "r", partial, nil)
		require.True(t, p.soon, "partial grant %d", i+1)
		require.LessOrEqual(t, p.backoff(lc, i), fairRetry)
	}
	p.failed(nil, "r", partial, nil)
	require.False(t, p.soon, "one partial grant too many")
	p.failed(nil, "r", &QuorumError{}, nil)
	p.failed(nil, "r", partial, nil)
	require.True(t, p.soon, "a refusal starts the count again")

	p.failed(nil, "r", &QuorumError{}, &place{ahead: 2})
	require.True(t, p.behind)
	for range 100 {
		b := p.backoff(lc, 0)
		require.GreaterOrEqual(t, b, lc.retryMax/2, "behind others: no polling")
		require.LessOrEqual(t, b, lc.retryMax)
	}
	require.True(t, p.farBehind(&place{ahead: 2}))
	require.False(t, p.farBehind(&place{ahead: 1}))
}

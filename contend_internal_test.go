package redlock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

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
	var p pace
	w := &place{}
	for i := range fairSoonMax {
		p.failed(nil, "r", partial, w)
		require.True(t, p.soon, "partial grant %d", i+1)
		require.LessOrEqual(t, p.backoff(lc, i), fairRetry)
	}
	p.failed(nil, "r", partial, w)
	require.False(t, p.soon, "one partial grant too many")
	p.failed(nil, "r", &QuorumError{}, w)
	p.failed(nil, "r", partial, w)
	require.True(t, p.soon, "a refusal starts the count again")
	p.failed(nil, "r", partial, nil)
	require.False(t, p.soon, "not a waiter yet: no quick retry")

	p.failed(nil, "r", &QuorumError{}, &place{ahead: 2})
	require.True(t, p.behind)
	for range 100 {
		b := p.backoff(lc, 0)
		require.GreaterOrEqual(t, b, lc.retryMax/2, "behind others: no polling")
		require.LessOrEqual(t, b, lc.retryMax)
	}
	// Far behind, it polls about when its turn may come, never past half
	// the lease its polls renew.
	p.failed(nil, "r", &QuorumError{}, &place{ahead: 255})
	for range 100 {
		b := p.backoff(lc, 0)
		require.GreaterOrEqual(t, b, fairLease(lc)/4)
		require.LessOrEqual(t, b, fairLease(lc)/2)
	}
	require.True(t, p.farBehind(&place{ahead: 2}))
	require.False(t, p.farBehind(&place{ahead: 1}))
}

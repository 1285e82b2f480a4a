package node

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/redistest"
)

// dialedConn starts a redis-server and returns a node dialed to it (closed
// when the test ends) and its connection, idle.
func dialedConn(t *testing.T) (*Redis, *muxConn) {
	t.Helper()
	s := redistest.Start(t)
	r, err := Dial(s.URL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	mc, err := r.mux.conn(context.Background(), nil, 0)
	require.NoError(t, err)
	require.NotNil(t, mc.aw, "a dialed connection can wait for a reply")
	return r, mc
}

// TestLoneOnlyWhenIdle: a command is lone (written and read by its caller)
// only on an idle connection of a dialed node: not while a command waits for
// the writer (it would overtake it) or a reply is outstanding.
func TestLoneOnlyWhenIdle(t *testing.T) {
	r, mc := dialedConn(t)
	deadline := time.Now().Add(time.Second)

	v, err, sent := mc.lone(deadline, nil, newMuxReq("PING", nil))
	require.True(t, sent, "idle: lone")
	require.NoError(t, err)
	assert.Equal(t, "PONG", v)

	mc.queued.Add(1)
	_, _, sent = mc.lone(deadline, nil, newMuxReq("PING", nil))
	mc.queued.Add(-1)
	assert.False(t, sent, "a command waits for the writer")

	mc.inflight.Add(1)
	_, _, sent = mc.lone(deadline, nil, newMuxReq("PING", nil))
	mc.inflight.Add(-1)
	assert.False(t, sent, "a reply is outstanding")

	// Through do: a context that can be cancelled is never lone (its
	// cancellation would not end the read), and still answered.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	assert.False(t, modeOf(ctx).lone)
	assert.True(t, modeOf(context.Background()).lone)
	v, err = r.mux.do(ctx, modeOf(ctx), "PING")
	require.NoError(t, err)
	assert.Equal(t, "PONG", v)
}

// TestLateStopSparesTheNextWait: the stop of an earlier lone command's wait
// that runs late (its context.AfterFunc goroutine, which nothing waits for)
// does not cut the next lone command's wait short on the same connection (an
// adversarial review saw a false timeout, counted against the node).
func TestLateStopSparesTheNextWait(t *testing.T) {
	_, mc := dialedConn(t)
	watch, cancel := context.WithCancel(context.Background()) // alive
	defer cancel()
	mc.imu.Lock()
	earlier := mc.wgen // the generation of a wait that is over
	mc.imu.Unlock()
	time.AfterFunc(20*time.Millisecond, func() { mc.stop(earlier) })
	start := time.Now()
	// BLPOP answers after 100ms: past the spin, so the wait is watched.
	_, err, sent := mc.lone(time.Now().Add(time.Second), watch, newMuxReq("BLPOP", []any{"nokey", "0.1"}))
	require.True(t, sent)
	require.NoError(t, err, "after %v", time.Since(start))
	assert.GreaterOrEqual(t, time.Since(start), 90*time.Millisecond)
}

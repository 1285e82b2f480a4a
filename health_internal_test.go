package redlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/node"
)

func TestNodeErrorKind(t *testing.T) {
	for _, tc := range []struct {
		err  error
		kind string
	}{
		{nil, ""},
		{context.DeadlineExceeded, KindTimeout},
		{fmt.Errorf("node: dial x: %w", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}), KindRefused},
		{fmt.Errorf("read: %w", syscall.ECONNRESET), KindConnection},
		{io.EOF, KindConnection},
		{fmt.Errorf("node: AUTH on h:1: %w", redis.Error("WRONGPASS invalid username-password pair or user is disabled.")), KindAuth},
		{redis.Error("NOAUTH Authentication required."), KindAuth},
		{redis.Error("NOPERM this user has no permissions to run the 'evalsha' command"), KindPermission},
		{&node.QuarantineError{Until: time.Now()}, KindQuarantined},
		{&node.SameInstanceError{Node: "a", Other: "b"}, KindSameInstance},
		{fmt.Errorf("%w: x", node.ErrUnexpectedReply), KindReply},
		{redis.Error("OOM command not allowed"), KindRedis},
		{errors.New("something"), KindOther},
	} {
		assert.Equal(t, tc.kind, NodeErrorKind(tc.err), "%v", tc.err)
	}
}

// The record's state follows the calls' outcomes, and reports each change
// once.
func TestNodeHealthRecord(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	refusal := redis.Error("WRONGPASS invalid")
	quarantined := &node.QuarantineError{Until: at(5000)}
	type step struct {
		ms     int
		err    error
		state  NodeState
		change bool
		probe  bool
	}
	for _, tc := range []struct {
		name      string
		threshold int
		steps     []step
	}{
		{"timeouts open the breaker", 3, []step{
			{0, nil, NodeOK, false, false},
			{10, context.DeadlineExceeded, NodeFailing, true, false},
			{20, context.DeadlineExceeded, NodeFailing, false, false},
			{30, context.DeadlineExceeded, NodeBreakerOpen, true, true},
			{40, context.DeadlineExceeded, NodeBreakerOpen, false, false}, // a late one: the probe runs already
			{50, nil, NodeOK, true, false},                                // an answer in flight closes it
		}},
		{"no breaker", 0, []step{
			{10, context.DeadlineExceeded, NodeFailing, true, false},
			{20, context.DeadlineExceeded, NodeFailing, false, false},
			{30, context.DeadlineExceeded, NodeFailing, false, false},
			{2000, nil, NodeOK, true, false},
		}},
		{"an error reply resets the breaker's count", 3, []step{
			{10, context.DeadlineExceeded, NodeFailing, true, false},
			{20, context.DeadlineExceeded, NodeFailing, false, false},
			{30, refusal, NodeFailing, false, false},
			{40, context.DeadlineExceeded, NodeFailing, false, false},
			{1100, refusal, NodeFailing, false, false},
		}},
		{"quarantine", 3, []step{
			{10, quarantined, NodeQuarantined, true, false},
			{20, nil, NodeQuarantined, false, false}, // a release answered
			{5000, nil, NodeOK, true, false},
		}},
		{"canceled teaches nothing", 3, []step{
			{10, context.Canceled, NodeOK, false, false},
			{20, fmt.Errorf("x: %w", context.Canceled), NodeOK, false, false},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newNodeHealth(tc.threshold, 100*time.Millisecond)
			for k, s := range tc.steps {
				probe, change := h.record(s.err, at(s.ms))
				assert.Equal(t, s.probe, probe, "step %d: probe", k)
				assert.Equal(t, s.change, change != nil, "step %d: change %+v", k, change)
				if change != nil {
					assert.Equal(t, s.state, change.State, "step %d", k)
					assert.NotEqual(t, change.From, change.State, "step %d", k)
				}
				h.mu.Lock()
				snap := h.snapshotLocked(at(s.ms))
				h.mu.Unlock()
				assert.Equal(t, s.state, snap.State, "step %d", k)
				if s.err == nil {
					assert.True(t, snap.FailingSince.IsZero(), "step %d", k)
					assert.Equal(t, at(s.ms), snap.LastOK, "step %d", k)
				}
			}
		})
	}
}

// A state change is logged at most once per node and state in healthLogEvery.
func TestNodeHealthLogRate(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	h := newNodeHealth(3, 100*time.Millisecond)
	require.True(t, h.shouldLog(NodeFailing, now))
	require.True(t, h.shouldLog(NodeOK, now), "another state")
	require.False(t, h.shouldLog(NodeFailing, now.Add(healthLogEvery-time.Millisecond)))
	require.True(t, h.shouldLog(NodeFailing, now.Add(healthLogEvery)))
}

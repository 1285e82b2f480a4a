package node_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

func TestRestartQuarantineOption(t *testing.T) {
	for name, d := range map[string]time.Duration{
		"zero":     0,
		"negative": -time.Second,
		"too long": node.MaxRestartQuarantine + time.Millisecond,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := node.Dial("redis://localhost", node.WithRestartQuarantine(d))
			assert.ErrorIs(t, err, node.ErrInvalidOption)
		})
	}
	n, err := node.Dial("redis://localhost", node.WithRestartQuarantine(node.MaxRestartQuarantine))
	require.NoError(t, err)
	require.NoError(t, n.Close())
}

// acquire takes key on n with a 2s bound.
func acquire(t *testing.T, n node.Node, key, token string) (node.Acquired, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return n.Acquire(ctx, key, key+":fence", token, 10*time.Second)
}

// waitQuarantine sleeps until the quarantine qe has ended.
func waitQuarantine(qe *node.QuarantineError) {
	time.Sleep(time.Until(qe.Until) + time.Millisecond)
}

// acquireAfterQuarantine waits out qe, and any quarantine that a connection
// dialed meanwhile extended it to (the node's uptime only has whole seconds).
func acquireAfterQuarantine(t *testing.T, n *node.Redis, key, token string, qe *node.QuarantineError) (node.Acquired, error) {
	for i := 0; i < 10; i++ {
		waitQuarantine(qe)
		a, err := acquire(t, n, key, token)
		if !errors.As(err, &qe) {
			return a, err
		}
	}
	t.Fatal("the quarantine never ended")
	return node.Acquired{}, nil
}

func TestRestartQuarantine(t *testing.T) {
	srv := redistest.Start(t)
	const d = 400 * time.Millisecond
	n, err := node.Dial(srv.URL(), node.WithRestartQuarantine(d))
	require.NoError(t, err)
	defer n.Close()
	ctx := context.Background()

	// The server has just started: the node is quarantined for d from the first
	// connection, and nothing is written.
	before := time.Now()
	_, err = acquire(t, n, "k", "t1")
	require.ErrorIs(t, err, node.ErrQuarantined)
	var qe *node.QuarantineError
	require.ErrorAs(t, err, &qe)
	assert.Empty(t, qe.PrevRunID)
	assert.Len(t, qe.RunID, 40)
	assert.Equal(t, d, qe.Quarantine)
	assert.WithinDuration(t, before.Add(d), qe.Until, 200*time.Millisecond)
	assert.Contains(t, err.Error(), "up only")
	assert.Contains(t, err.Error(), "grants no lock until")
	assert.Empty(t, srv.Keys("*"), "a quarantined node must not receive the SET")

	// Release, Extend and WriteFence still reach the node.
	_, err = srv.Do("SET", "k", "t0", "PX", 10000)
	require.NoError(t, err)
	ok, err := n.Extend(ctx, "k", "t0", 20*time.Second)
	require.NoError(t, err)
	assert.True(t, ok)
	ok, err = n.WriteFence(ctx, "k", "k:fence", "t0", 7)
	require.NoError(t, err)
	assert.True(t, ok)
	ok, err = n.Release(ctx, "k", "t0", false)
	require.NoError(t, err)
	assert.True(t, ok)
	require.NoError(t, n.Ping(ctx))

	// Once the quarantine is over, the same (pooled) connection acquires.
	a, err := acquireAfterQuarantine(t, n, "k", "t1", qe)
	require.NoError(t, err)
	assert.True(t, a.OK)
	assert.Equal(t, uint64(7), a.Fence)

	// A restart loses the key. The pooled connection breaks (a failed vote); the
	// next one sees the new run id and the node is quarantined again.
	srv.Kill()
	srv.Restart()
	// Each pipelined connection broken by the restart fails one call (a failed
	// vote); the first one dialed afterwards sees the new run id.
	for i := 0; i < 4; i++ {
		if _, err = acquire(t, n, "k", "t2"); errors.Is(err, node.ErrQuarantined) {
			break
		}
		require.Error(t, err, "a call on a connection broken by the restart")
	}
	require.ErrorIs(t, err, node.ErrQuarantined)
	require.ErrorAs(t, err, &qe)
	assert.NotEmpty(t, qe.PrevRunID)
	assert.NotEqual(t, qe.PrevRunID, qe.RunID)
	assert.Contains(t, err.Error(), "restarted")
	assert.Empty(t, srv.Keys("*"))

	a, err = acquireAfterQuarantine(t, n, "k", "t2", qe)
	require.NoError(t, err)
	assert.True(t, a.OK)
	assert.False(t, a.HasFence, "the counter was lost with the restart")
}

func TestRestartQuarantineLongRunningNode(t *testing.T) {
	srv := redistest.Start(t)
	// Redis reports the uptime in whole seconds of its wall clock, which may
	// overstate it by up to a second: wait until it reads 2s (at least 1s up).
	deadline := time.Now().Add(5 * time.Second)
	for {
		info, err := redis.String(srv.Do("INFO", "server"))
		require.NoError(t, err)
		if !strings.Contains(info, "uptime_in_seconds:0\r") && !strings.Contains(info, "uptime_in_seconds:1\r") {
			break
		}
		require.True(t, time.Now().Before(deadline), "uptime did not reach 2s")
		time.Sleep(50 * time.Millisecond)
	}
	n, err := node.Dial(srv.URL(), node.WithRestartQuarantine(500*time.Millisecond))
	require.NoError(t, err)
	defer n.Close()
	a, err := acquire(t, n, "k", "t1")
	require.NoError(t, err, "a node up for longer than the quarantine counts at once")
	assert.True(t, a.OK)
}

func TestRestartQuarantineWithoutOptionIsOff(t *testing.T) {
	srv := redistest.Start(t)
	n, err := node.Dial(srv.URL())
	require.NoError(t, err)
	defer n.Close()
	a, err := acquire(t, n, "k", "t1")
	require.NoError(t, err)
	assert.True(t, a.OK)
}

func TestRestartQuarantineNeedsInfo(t *testing.T) {
	// A server whose INFO has no server section (as miniredis answers, or a
	// proxy): the check cannot be made, so the connection is refused rather
	// than trusted.
	srv := startFake(t, infoWithout)
	n, err := node.Dial(srv.URL(), node.WithRestartQuarantine(time.Second))
	require.NoError(t, err)
	defer n.Close()
	err = n.Ping(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "restart check")
	assert.False(t, errors.Is(err, node.ErrQuarantined))
}

// infoWithout serves RESP commands on c: INFO gets a reply with a clients
// section only (no run_id, no uptime_in_seconds), PING gets PONG, anything else
// an error reply.
func infoWithout(c net.Conn) {
	r := bufio.NewReader(c)
	for {
		args, err := readCommand(r)
		if err != nil {
			return
		}
		reply := "-ERR unknown command\r\n"
		switch strings.ToUpper(args[0]) {
		case "INFO":
			info := "# Clients\r\nconnected_clients:1\r\n"
			reply = "$" + strconv.Itoa(len(info)) + "\r\n" + info + "\r\n"
		case "PING":
			reply = "+PONG\r\n"
		}
		if _, err := c.Write([]byte(reply)); err != nil {
			return
		}
	}
}

// readCommand reads one command as clients send it: an array of bulk strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	line := func() (string, error) {
		l, err := r.ReadString('\n')
		return strings.TrimSuffix(l, "\r\n"), err
	}
	head, err := line()
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(strings.TrimPrefix(head, "*"))
	if err != nil || !strings.HasPrefix(head, "*") || n < 1 {
		return nil, fmt.Errorf("not a command: %q", head)
	}
	args := make([]string, n)
	for i := range args {
		h, err := line()
		if err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimPrefix(h, "$"))
		if err != nil || !strings.HasPrefix(h, "$") || size < 0 {
			return nil, fmt.Errorf("not a bulk string: %q", h)
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		args[i] = string(buf[:size])
	}
	return args, nil
}

func serverInfo(runID string, uptimeSec int) string {
	return "# Server\r\nredis_version:7.0.15\r\nrun_id:" + runID + "\r\nuptime_in_seconds:" + strconv.Itoa(uptimeSec) + "\r\n"
}

func TestRestartGuard(t *testing.T) {
	const d = 10 * time.Second
	a, b := strings.Repeat("a", 40), strings.Repeat("b", 40)
	type obs struct {
		runID  string
		uptime int
	}
	for _, tc := range []struct {
		name      string
		seen      []obs
		wantUntil time.Duration // from the last observation; 0 means no quarantine
		wantPrev  string
	}{
		{name: "long up", seen: []obs{{a, 3600}}},
		{name: "fresh start", seen: []obs{{a, 3}}, wantUntil: d - 2*time.Second},
		{name: "same process again", seen: []obs{{a, 3600}, {a, 3601}}},
		// A Sentinel failover puts a long-running replica behind the address: its
		// uptime says nothing about the keys it lacks.
		{name: "failover to a long-running replica", seen: []obs{{a, 3600}, {b, 7200}}, wantUntil: d, wantPrev: a},
		{name: "restart", seen: []obs{{a, 3600}, {b, 1}}, wantUntil: d, wantPrev: a},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := node.NewRestartGuard(d)
			require.NoError(t, err)
			now := time.Now()
			for _, o := range tc.seen {
				require.NoError(t, g.Observe(serverInfo(o.runID, o.uptime), now))
			}
			err = g.Refusal()
			if tc.wantUntil == 0 {
				assert.NoError(t, err)
				return
			}
			var qe *node.QuarantineError
			require.ErrorAs(t, err, &qe)
			assert.ErrorIs(t, err, node.ErrQuarantined)
			assert.Equal(t, tc.wantPrev, qe.PrevRunID)
			assert.WithinDuration(t, now.Add(tc.wantUntil), qe.Until, time.Millisecond)
		})
	}
	_, err := node.NewRestartGuard(0)
	assert.ErrorIs(t, err, node.ErrInvalidOption)
	g, err := node.NewRestartGuard(d)
	require.NoError(t, err)
	assert.ErrorIs(t, g.Observe("# Server\r\nredis_version:7\r\n", time.Now()), node.ErrUnexpectedReply)
	assert.NoError(t, g.Refusal())
}

// TestQuarantineRefusesOnlyAcquisitions: the connection that detects the
// quarantine refuses the acquisitions queued on it, and only them: releases
// pipelined on the same connection go through.
func TestQuarantineRefusesOnlyAcquisitions(t *testing.T) {
	srv := redistest.Start(t)
	n, err := node.Dial(srv.URL(), node.WithRestartQuarantine(10*time.Second))
	require.NoError(t, err)
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := 0; i < 24; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start // all wait for the same first dial, then share its connection
			if i%8 == 0 {
				_, err := n.Acquire(ctx, "a"+strconv.Itoa(i), "f", "tok", time.Second)
				assert.ErrorIs(t, err, node.ErrQuarantined)
				return
			}
			_, err := n.Release(ctx, "r"+strconv.Itoa(i), "tok", true)
			errs <- err
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err, "a release pipelined with a refused acquisition")
	}
	assert.Empty(t, srv.Keys("a*"), "no refused SET reached the node")
}

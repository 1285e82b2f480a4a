package node_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

// proxy forwards TCP connections from a loopback port to target: another
// address of the same instance. It returns the proxy's address.
func proxy(t *testing.T, target string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, in, out)
			mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(out, in); out.Close() }()
			go func() { defer wg.Done(); _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
	return l.Addr().String()
}

func TestSameInstanceRefused(t *testing.T) {
	s, other := redistest.Start(t), redistest.Start(t)
	set := node.NewInstances()
	ctx := context.Background()
	direct, err := node.Dial(s.URL(), node.WithInstances(set))
	require.NoError(t, err)
	defer direct.Close()
	viaProxy, err := node.Dial("redis://"+proxy(t, s.Addr()), node.WithInstances(set))
	require.NoError(t, err)
	defer viaProxy.Close()
	third, err := node.Dial(other.URL(), node.WithInstances(set))
	require.NoError(t, err)
	defer third.Close()

	require.NoError(t, direct.Ping(ctx))
	require.NoError(t, third.Ping(ctx))
	err = viaProxy.Ping(ctx)
	require.ErrorIs(t, err, node.ErrSameInstance)
	var se *node.SameInstanceError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, viaProxy.Name(), se.Node)
	assert.Equal(t, direct.Name(), se.Other)
	assert.Contains(t, err.Error(), viaProxy.Name())
	assert.Contains(t, err.Error(), direct.Name())
	_, err = viaProxy.Acquire(ctx, "k", "k:f", "t", time.Second)
	require.ErrorIs(t, err, node.ErrSameInstance, "every call fails: no second vote")
	assert.Empty(t, s.Keys("k"))

	// Without a shared set (another client), the same instance is fine.
	alone, err := node.Dial("redis://"+proxy(t, s.Addr()), node.WithInstances(node.NewInstances()))
	require.NoError(t, err)
	defer alone.Close()
	require.NoError(t, alone.Ping(ctx))
}

func TestInstancesObserve(t *testing.T) {
	set := node.NewInstances()
	info := func(id string) string { return "# Server\r\nrun_id:" + id + "\r\nuptime_in_seconds:100\r\n" }
	require.NoError(t, set.Observe("a", info("r1")))
	require.NoError(t, set.Observe("a", info("r1")), "the same node again")
	require.NoError(t, set.Observe("b", info("r2")))
	require.ErrorIs(t, set.Observe("c", info("r1")), node.ErrSameInstance)
	require.NoError(t, set.Observe("a", info("r3")), "a restarted: r1 is free")
	require.NoError(t, set.Observe("c", info("r1")))
	require.ErrorIs(t, set.Observe("a", "uptime_in_seconds:1\r\n"), node.ErrUnexpectedReply)
	_, err := node.Dial("redis://h", node.WithInstances(nil))
	require.ErrorIs(t, err, node.ErrInvalidOption)
}

// FuzzObserveInfo: the INFO server parser shared by the restart quarantine and
// the same-instance check never panics, accepts a text only with a run_id and a
// valid uptime, and then quarantines for at most the configured duration. The
// seeds in testdata/fuzz/FuzzObserveInfo run with every go test.
func FuzzObserveInfo(f *testing.F) {
	f.Add("# Server\r\nredis_version:7.0.15\r\nrun_id:4b1c3f0d9a\r\nuptime_in_seconds:12\r\n")
	f.Add("run_id:x\nuptime_in_seconds:99999999999999999999\n")
	f.Add("run_id:\r\nuptime_in_seconds:-1\r\n")
	f.Fuzz(func(t *testing.T, info string) {
		const d = 10 * time.Second
		g, err := node.NewRestartGuard(d)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		gerr := g.Observe(info, now)
		ierr := node.NewInstances().Observe("a", info)
		if (gerr == nil) != (ierr == nil) {
			t.Fatalf("guard %v, instances %v: one parser, one answer", gerr, ierr)
		}
		if gerr != nil {
			if !errors.Is(gerr, node.ErrUnexpectedReply) {
				t.Fatalf("error %v is not ErrUnexpectedReply", gerr)
			}
			if g.Refusal() != nil {
				t.Fatal("a failed Observe changed the guard")
			}
			return
		}
		if !strings.Contains(info, "run_id:") || !strings.Contains(info, "uptime_in_seconds:") {
			t.Fatalf("accepted %q without run_id and uptime", info)
		}
		var qe *node.QuarantineError
		if err := g.Refusal(); err != nil {
			if !errors.As(err, &qe) || qe.Until.After(now.Add(d)) || qe.RunID == "" {
				t.Fatalf("refusal %v for %q", err, info)
			}
		}
	})
}

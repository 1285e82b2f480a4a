package node_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redlock-go/redlock/node"
)

// fakeServer is a Go listener standing in for a node: serve runs on every
// accepted connection. Close closes the listener and every connection, and
// waits for the serving goroutines.
type fakeServer struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func startFake(t *testing.T, serve func(net.Conn)) *fakeServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &fakeServer{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() { defer s.wg.Done(); serve(c) }()
		}
	}()
	t.Cleanup(s.Close)
	return s
}

func (s *fakeServer) URL() string { return "redis://" + s.ln.Addr().String() }

func (s *fakeServer) Close() {
	s.ln.Close()
	s.mu.Lock()
	for _, c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// answer replies to every read with reply, until the connection closes.
func answer(reply string) func(net.Conn) {
	return func(c net.Conn) {
		buf := make([]byte, 4096)
		for {
			if _, err := c.Read(buf); err != nil {
				return
			}
			if _, err := c.Write([]byte(reply)); err != nil {
				return
			}
		}
	}
}

// TestGarbageReplies: a node answering replies that would make redigo panic
// (makeslice) or run out of memory is a node error; the process survives and no
// goroutine is left behind.
func TestGarbageReplies(t *testing.T) {
	for _, tt := range []struct {
		reply string
		want  error
	}{
		{"$9223372036854775807\r\n", node.ErrReplyTooLarge},
		{"$99999999999999999999\r\n", node.ErrReplyTooLarge},
		{"*3000000000\r\n", node.ErrReplyTooLarge},
		{"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n", node.ErrMalformedReply},
		{"$-5\r\n", node.ErrMalformedReply},
		{"~1\r\n", node.ErrMalformedReply},
	} {
		t.Run(strings.TrimSpace(tt.reply[:min(12, len(tt.reply))]), func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			srv := startFake(t, answer(tt.reply))
			defer srv.Close()
			n, err := node.Dial(srv.URL(), node.WithTimeout(time.Second))
			require.NoError(t, err)
			defer n.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			err = n.Ping(ctx)
			require.ErrorIs(t, err, tt.want)
			assert.Contains(t, err.Error(), "node: ")
			_, err = n.Acquire(ctx, "k", "k:f", "tok", time.Second)
			require.ErrorIs(t, err, tt.want)
			// The subscriber reads the same garbage in reply to SUBSCRIBE.
			wctx, wcancel := context.WithTimeout(ctx, 200*time.Millisecond)
			_, stop, err := n.Watch(wctx, "k")
			wcancel()
			require.Error(t, err)
			stop()
		})
	}
}

// TestReplyLimitsOption: the limits are configurable, within bounds.
func TestReplyLimitsOption(t *testing.T) {
	for _, lim := range [][2]int64{{100, 1000}, {1 << 30, 1000}, {1 << 20, 1}, {1 << 20, 1 << 30}} {
		_, err := node.Dial("redis://localhost", node.WithReplyLimits(lim[0], lim[1]))
		assert.ErrorIs(t, err, node.ErrInvalidOption, "%v", lim)
	}
	srv := startFake(t, answer("$2000\r\n"))
	n, err := node.Dial(srv.URL(), node.WithReplyLimits(1<<10, 16))
	require.NoError(t, err)
	defer n.Close()
	err = n.Ping(context.Background())
	require.True(t, errors.Is(err, node.ErrReplyTooLarge), "%v", err)
	assert.Contains(t, err.Error(), "1024-byte")
}

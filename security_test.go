package redlock_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

// exercise takes name with a fence, extends it, reads the token, and releases it.
func exercise(t *testing.T, c *redlock.Client, name string) uint64 {
	t.Helper()
	tok, err := tryExercise(t, c, name)
	require.NoError(t, err)
	return tok
}

func tryExercise(t *testing.T, c *redlock.Client, name string) (uint64, error) {
	l, err := c.TryLock(ctxT(t, 5*time.Second), name, redlock.WithFence())
	if err != nil {
		return 0, err
	}
	defer l.Release(context.Background()) //nolint:errcheck // a second release is harmless
	if err := l.Extend(ctxT(t, 5*time.Second)); err != nil {
		return 0, err
	}
	tok, err := l.Fence(ctxT(t, 5*time.Second))
	if err != nil {
		return 0, err
	}
	return tok, l.Release(ctxT(t, 5*time.Second))
}

// Locks over rediss:// with certificates made at test time: the server checks
// the client's certificate, the client the server's against the test CA.
func TestTLS(t *testing.T) {
	s := redistest.StartTLS(t)
	cfg := s.Files.ClientConfig(t)
	for _, url := range []string{s.TLSURL(), strings.Replace(s.TLSURL(), "127.0.0.1", "localhost", 1)} {
		// 5 s: a TLS handshake under -race on a busy machine can outlast the
		// default node timeout (TestDialTLS, TestRunAndStatusTLS did).
		c, err := redlock.Dial([]string{url}, redlock.WithNodeTimeout(5*time.Second), redlock.WithNodeOptions(node.WithTLSConfig(cfg)))
		require.NoError(t, err)
		assert.Positive(t, exercise(t, c, "tls-job"))
		require.NoError(t, c.Close())
	}
	assert.Equal(t, []string{"redlock:{tls-job}:fence"}, s.Keys("*"), "the lock went through the TLS port")

	for name, tc := range map[string]struct {
		cfg  *tls.Config
		want string
	}{
		"system roots":       {nil, "certificate signed by unknown authority"},
		"no client cert":     {&tls.Config{RootCAs: cfg.RootCAs}, ""},
		"other server name":  {&tls.Config{RootCAs: cfg.RootCAs, Certificates: cfg.Certificates, ServerName: "redis.example"}, "redis.example"},
		"plaintext expected": {cfg, ""},
	} {
		t.Run(name, func(t *testing.T) {
			url := s.TLSURL()
			opts := []node.Option{node.WithTimeout(5 * time.Second)}
			if tc.cfg != nil {
				opts = append(opts, node.WithTLSConfig(tc.cfg))
			}
			if name == "plaintext expected" {
				url, opts = "redis://"+s.TLSAddr(), opts[:1] // a plaintext client on the TLS port
			}
			n, err := node.Dial(url, opts...)
			require.NoError(t, err)
			defer n.Close()
			err = n.Ping(ctxT(t, 5*time.Second))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// MinimalACL is the ACL rule of docs/operations.md: the commands the library
// sends (the scripts' own calls included), on its keys and channels only.
const MinimalACL = "on >lock-pw resetkeys ~redlock:* resetchannels &redlock:* -@all " +
	"+evalsha +eval +get +set +pexpire +del +publish +time +subscribe +unsubscribe +ping +info " + QueueACL

// A user with only the minimal ACL acquires, extends, fences, waits (pub/sub)
// and releases.
func TestMinimalACL(t *testing.T) {
	s := redistest.Start(t)
	args := []any{"SETUSER", "locker"}
	for _, f := range strings.Fields(MinimalACL) {
		args = append(args, f)
	}
	_, err := s.Do("ACL", args...)
	require.NoError(t, err)
	url := "redis://locker:lock-pw@" + s.Addr()

	c, err := redlock.Dial([]string{url}, redlock.WithTTL(5*time.Second))
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, uint64(1), exercise(t, c, "acl-job"))
	assert.Equal(t, uint64(2), exercise(t, c, "acl-job"))

	// A waiter of another client is woken by the release (SUBSCRIBE, PUBLISH).
	other, err := redlock.Dial([]string{url}, redlock.WithRetryBackoff(10*time.Second, 10*time.Second))
	require.NoError(t, err)
	defer other.Close()
	wokenByRelease(t, s, c, other, "acl-job")

	// INFO, for the restart quarantine and the same-instance check; nothing else.
	conn, err := redis.Dial("tcp", s.Addr(), redis.DialUsername("locker"), redis.DialPassword("lock-pw"))
	require.NoError(t, err)
	defer conn.Close()
	info, err := redis.String(conn.Do("INFO", "server"))
	require.NoError(t, err)
	assert.Contains(t, info, "run_id:")
	for _, cmd := range [][]any{{"GET", "other:key"}, {"FLUSHALL"}, {"KEYS", "*"}, {"CONFIG", "GET", "*"}} {
		_, err := conn.Do(cmd[0].(string), cmd[1:]...)
		assert.ErrorContains(t, err, "NOPERM", "%v", cmd)
	}
}

// Each command the scripts call is needed: without it, some step fails.
func TestMinimalACLIsNeeded(t *testing.T) {
	s := redistest.Start(t)
	for i, cmd := range []string{"+evalsha", "+eval", "+get", "+set", "+pexpire", "+del"} {
		user := fmt.Sprintf("u%d", i)
		args := []any{"SETUSER", user}
		for _, f := range strings.Fields(MinimalACL) {
			if f != cmd {
				args = append(args, f)
			}
		}
		_, err := s.Do("ACL", args...)
		require.NoError(t, err)
		_, err = s.Do("SCRIPT", "FLUSH") // EVALSHA first answers NOSCRIPT, then EVAL runs
		require.NoError(t, err)
		c, err := redlock.Dial([]string{"redis://" + user + ":lock-pw@" + s.Addr()})
		require.NoError(t, err)
		_, err = tryExercise(t, c, "needs-"+cmd[1:])
		assert.Error(t, err, "without %s", cmd)
		require.NoError(t, c.Close())
	}
}

// QueueACL is the part of MinimalACL that the waiters' queue needs
// (docs/operations.md): its scripts keep sorted sets. Before the queue was
// one (2026-12-03), the default mode did without it. +mget since
// 2026-12-04: the release reads the lock key and the queue's mark in one
// command; without it the release reads them apart (one command more).
const QueueACL = "+zadd +zrem +zrange +zrangebyscore +zscore +zrank +exists +pttl +mget"

// Both modes wait, woken by a release, as a user with MinimalACL; without
// QueueACL (a rule written for the default mode before the queue was one)
// locks taken at once still work in the default mode (the release falls
// back to release.lua), and a Lock call that has to wait fails at once with
// an error that names the missing permission.
func TestMinimalACLQueue(t *testing.T) {
	s := redistest.Start(t)
	old := strings.TrimSuffix(MinimalACL, " "+QueueACL)
	require.NotEqual(t, MinimalACL, old)
	noMGET := strings.Replace(MinimalACL, " +mget", "", 1) // a rule of 2026-12-03
	require.NotEqual(t, MinimalACL, noMGET)
	for user, rule := range map[string]string{"old": old, "min": MinimalACL, "nomget": noMGET} {
		args := []any{"SETUSER", user}
		for _, f := range strings.Fields(rule) {
			args = append(args, f)
		}
		_, err := s.Do("ACL", args...)
		require.NoError(t, err)
	}
	for _, mode := range []struct {
		name string
		opts []redlock.Option
	}{{"default", nil}, {"fair", []redlock.Option{redlock.WithFair()}}} {
		t.Run(mode.name, func(t *testing.T) {
			res := "queue-acl-" + mode.name
			c, err := redlock.Dial([]string{"redis://min:lock-pw@" + s.Addr()}, mode.opts...)
			require.NoError(t, err)
			defer c.Close()
			exercise(t, c, res)
			other, err := redlock.Dial([]string{"redis://min:lock-pw@" + s.Addr()},
				append(mode.opts, redlock.WithRetryBackoff(10*time.Second, 10*time.Second))...)
			require.NoError(t, err)
			defer other.Close()
			wokenByRelease(t, s, c, other, res)

			// Without MGET the release reads the lock key and the queue's
			// mark apart: it still releases, and wakes the queue's head.
			nc, err := redlock.Dial([]string{"redis://nomget:lock-pw@" + s.Addr()}, mode.opts...)
			require.NoError(t, err)
			defer nc.Close()
			exercise(t, nc, res)
			wokenByRelease(t, s, nc, other, res)

			oc, err := redlock.Dial([]string{"redis://old:lock-pw@" + s.Addr()}, mode.opts...)
			require.NoError(t, err)
			defer oc.Close()
			if mode.name == "default" {
				exercise(t, oc, res) // TryLock, extend, fence, release: no queue
			}
			l, err := c.TryLock(ctxT(t, 5*time.Second), res)
			require.NoError(t, err)
			defer l.Release(context.Background())
			start := time.Now()
			_, err = oc.Lock(ctxT(t, 10*time.Second), res)
			require.Error(t, err, "a waiter without the queue's commands")
			assert.ErrorContains(t, err, "permission denied")
			assert.Less(t, time.Since(start), 5*time.Second, "fails at once, not by its deadline")
		})
	}
}

// wokenByRelease has holder take resource on s, other wait for it (its
// backoff must be longer than 5 s), and checks that holder's release wakes
// other: it gets the lock well before its backoff would have run out.
func wokenByRelease(t *testing.T, s *redistest.Server, holder, other *redlock.Client, resource string) {
	t.Helper()
	l, err := holder.TryLock(ctxT(t, 5*time.Second), resource)
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		l2, err := other.Lock(ctxT(t, 8*time.Second), resource)
		if err == nil {
			err = l2.Release(context.Background())
		}
		got <- err
	}()
	waitListening(t, []*redistest.Server{s}, redlock.LockKey("redlock:", resource))
	start := time.Now()
	require.NoError(t, l.Release(ctxT(t, 5*time.Second)))
	require.NoError(t, <-got)
	assert.Less(t, time.Since(start), 5*time.Second, "woken by the release, not by its backoff")
}

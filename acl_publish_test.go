package redlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/redistest"
)

// Users who may not publish (MinimalACL without +publish, and a Redis 7 user
// "~* +@all", which has no channel permissions by default) still release:
// the queue's scripts publish under pcall, as release.lua does. When
// fairrelease.lua published with redis.call after its DEL (an adversarial
// review of the one queue), every Release of theirs failed: ErrLockLost for
// the first (the fallback to release.lua found the key gone), ErrUnavailable
// for the second, and Do reported work that ran under the lock as possibly
// not exclusive.
func TestReleaseWithoutPublishPermission(t *testing.T) {
	servers := redistest.StartN(t, 3)
	nopub := []any{"SETUSER", "nopub"}
	for _, f := range strings.Fields(strings.Replace(MinimalACL, " +publish", "", 1)) {
		nopub = append(nopub, f)
	}
	var nopubURLs, appURLs []string
	for _, s := range servers {
		_, err := s.Do("ACL", nopub...)
		require.NoError(t, err)
		_, err = s.Do("ACL", "SETUSER", "app", "on", ">pw", "~*", "+@all")
		require.NoError(t, err)
		nopubURLs = append(nopubURLs, "redis://nopub:lock-pw@"+s.Addr())
		appURLs = append(appURLs, "redis://app:pw@"+s.Addr())
	}
	for _, tc := range []struct {
		name string
		urls []string
		opts []redlock.Option
	}{
		{"no +publish", nopubURLs, nil},
		{"no +publish, fair", nopubURLs, []redlock.Option{redlock.WithFair()}},
		{"no channels", appURLs, nil},
		{"no channels, fair", appURLs, []redlock.Option{redlock.WithFair()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := "nopub-" + strings.ReplaceAll(strings.ReplaceAll(tc.name, " ", ""), ",", "-")
			c, err := redlock.Dial(tc.urls, tc.opts...)
			require.NoError(t, err)
			defer c.Close()
			l, err := c.TryLock(ctxT(t, 5*time.Second), res)
			require.NoError(t, err)
			require.NoError(t, l.Release(ctxT(t, 5*time.Second)), "Release of a lock held on every node")
			ran := false
			require.NoError(t, c.Do(ctxT(t, 5*time.Second), res, func(context.Context) error { ran = true; return nil }))
			assert.True(t, ran)
			// Do returns once a majority released; the third release may
			// still be on its way.
			for _, s := range servers {
				assert.Eventually(t, func() bool { return len(s.Keys(redlock.LockKey("redlock:", res))) == 0 },
					5*time.Second, time.Millisecond, "the key was deleted")
			}
		})
	}
}

package redlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/redistest"
)

// Nodes whose user may not run TIME (the minimal ACL documented before
// tickets were bounded): a Lock call that had to wait still gets the lock
// once it is free (the scripts read the clock under pcall, and the waiter's
// ticket falls back to its client's clock).
func TestWaiterWithoutTimeACL(t *testing.T) {
	const old = "on >lock-pw resetkeys ~redlock:* resetchannels &redlock:* -@all " +
		"+evalsha +eval +get +set +pexpire +del +publish +subscribe +unsubscribe +ping +info"
	servers := redistest.StartN(t, 3)
	var urls []string
	for _, s := range servers {
		args := []any{"SETUSER", "locker"}
		for _, f := range strings.Fields(old) {
			args = append(args, f)
		}
		_, err := s.Do("ACL", args...)
		require.NoError(t, err)
		urls = append(urls, "redis://locker:lock-pw@"+s.Addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := redlock.Dial(urls)
	require.NoError(t, err)
	defer a.Close()
	b, err := redlock.Dial(urls, redlock.WithRetryBackoff(10*time.Millisecond, 100*time.Millisecond))
	require.NoError(t, err)
	defer b.Close()
	held, err := a.Lock(ctx, "acl-old")
	require.NoError(t, err)
	go func() { time.Sleep(300 * time.Millisecond); _ = held.Release(ctx) }()
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	start := time.Now()
	l, err := b.Lock(wctx, "acl-old")
	t.Logf("after %v: lock %v, err %v", time.Since(start), l != nil, err)
	require.NoError(t, err, "the lock was free after 300 ms")
}

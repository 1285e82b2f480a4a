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
// tickets were bounded), but may run the queue's commands: the queue reads
// the nodes' clocks for tickets and leases, so a Lock call that has to wait
// fails with an error that names the permission (until 2026-12-03 the wake
// queue fell back to the client's clock); locks taken at once still work.
func TestWaiterWithoutTimeACL(t *testing.T) {
	const noTime = "on >lock-pw resetkeys ~redlock:* resetchannels &redlock:* -@all " +
		"+evalsha +eval +get +set +pexpire +del +publish +subscribe +unsubscribe +ping +info " + QueueACL
	servers := redistest.StartN(t, 3)
	var urls []string
	for _, s := range servers {
		args := []any{"SETUSER", "locker"}
		for _, f := range strings.Fields(noTime) {
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
	require.NoError(t, err, "a lock taken at once")
	wctx, wcancel := context.WithTimeout(ctx, time.Second)
	defer wcancel()
	_, err = b.Lock(wctx, "acl-old")
	require.Error(t, err)
	require.ErrorContains(t, err, "permission denied")
	require.NoError(t, held.Release(ctx), "the release falls back to release.lua")
}

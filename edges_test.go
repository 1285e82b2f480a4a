package redlock_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/redistest"
)

// A failed acquisition's message says what each node answered.
func TestQuorumErrorNamesEveryAnswer(t *testing.T) {
	servers := redistest.StartN(t, 2)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := "redis://" + l.Addr().String()
	require.NoError(t, l.Close())
	ctx := ctxT(t, 10*time.Second)

	// Another client holds the lock on the second node only.
	other, err := redlock.Dial([]string{servers[1].URL()})
	require.NoError(t, err)
	defer other.Close()
	held, err := other.TryLock(ctx, "answers")
	require.NoError(t, err)
	defer held.Release(ctx)

	c, err := redlock.Dial([]string{servers[0].URL(), servers[1].URL(), closed})
	require.NoError(t, err)
	defer c.Close()
	_, err = c.TryLock(ctx, "answers")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	msg := err.Error()
	// The healthy node's yes may come after the refusal and the failure have
	// decided the outcome: then it is said not to have been waited for, never
	// counted as a no.
	assert.Regexp(t, `acquire on 3 nodes \(2 needed\): (1 agreed, 1 refused \(held\), 1 failed \(connection refused\)|`+
		`0 agreed, 1 refused \(held\), 1 failed \(connection refused\), 1 not waited for \(the outcome was known without them\));`, msg)
	assert.Contains(t, msg, "; node "+strings.TrimPrefix(closed, "redis://")+"/0: ")
	assert.NotContains(t, msg, "\n")
}

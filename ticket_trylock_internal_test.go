package redlock

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/redistest"
)

// Fair mode, a client clock 2 s off: TryLock on a free resource succeeds
// (its one attempt has no ticket, and a free lock nobody waits for is
// granted).
func TestFairTryLockWrongClock(t *testing.T) {
	servers := redistest.StartN(t, 3)
	c, err := Dial(redistest.URLs(servers), WithFair())
	require.NoError(t, err)
	defer c.Close()
	c.ticketNow = func() time.Time { return time.Now().Add(2 * time.Second) }
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		// A resource of its own each time: a release that a loaded
		// machine delays past the node timeout would leave the key.
		l, err := c.TryLock(ctx, fmt.Sprintf("free-%d", i))
		t.Logf("TryLock on a free resource: %v", err)
		if assert.NoError(t, err) {
			require.NoError(t, l.Release(ctx))
		}
	}
}

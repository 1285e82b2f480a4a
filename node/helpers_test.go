package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

// dialed starts a redis-server and returns it, a node on it (closed when the
// test ends) and a context that bounds the test's calls to timeout.
func dialed(t *testing.T, timeout time.Duration) (*redistest.Server, *node.Redis, context.Context) {
	t.Helper()
	s := redistest.Start(t)
	n, err := node.Dial(s.URL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = n.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return s, n, ctx
}

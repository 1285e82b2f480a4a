package redlock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

// New's nodes are built already: node options given to it would be ignored
// (a restart quarantine believed on, and off), so it refuses them.
func TestNewRefusesNodeOptions(t *testing.T) {
	servers := redistest.StartN(t, 3)
	nodes := make([]node.Node, len(servers))
	for i, s := range servers {
		n, err := node.Dial(s.URL())
		require.NoError(t, err)
		t.Cleanup(func() { _ = n.Close() })
		nodes[i] = n
	}
	for name, tc := range map[string]struct {
		opts    []redlock.Option
		refused bool
	}{
		"quarantine":    {[]redlock.Option{redlock.WithNodeOptions(node.WithRestartQuarantine(time.Minute))}, true},
		"timeout":       {[]redlock.Option{redlock.WithNodeOptions(node.WithTimeout(time.Second))}, true},
		"none given":    {[]redlock.Option{redlock.WithNodeOptions()}, false},
		"logger only":   {[]redlock.Option{redlock.WithLogger(nil)}, false},
		"client option": {[]redlock.Option{redlock.WithNodeTimeout(time.Second)}, false},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := redlock.New(nodes, tc.opts...)
			if !tc.refused {
				require.NoError(t, err)
				require.NoError(t, c.Close())
				return
			}
			require.ErrorIs(t, err, redlock.ErrInvalid)
			assert.Contains(t, err.Error(), "WithNodeOptions given to New")
			assert.Contains(t, err.Error(), "node.Dial or node.FromPool")
		})
	}
}

// The client's node timeout is the nodes' timeout: Dial refuses a
// node.WithTimeout that disagrees with it.
func TestNodeTimeoutGivenTwice(t *testing.T) {
	servers := redistest.StartN(t, 3)
	urls := redistest.URLs(servers)
	for name, tc := range map[string]struct {
		opts    []redlock.Option
		refused string
	}{
		"node option only, not the default": {[]redlock.Option{redlock.WithNodeOptions(node.WithTimeout(time.Second))}, "node.WithTimeout(1s)"},
		"both, different":                   {[]redlock.Option{redlock.WithNodeTimeout(200 * time.Millisecond), redlock.WithNodeOptions(node.WithTimeout(time.Second))}, "200ms"},
		"both, equal":                       {[]redlock.Option{redlock.WithNodeTimeout(time.Second), redlock.WithNodeOptions(node.WithTimeout(time.Second))}, ""},
		"node option equal to the default":  {[]redlock.Option{redlock.WithNodeOptions(node.WithTimeout(redlock.DefaultNodeTimeout))}, ""},
		"client option only":                {[]redlock.Option{redlock.WithNodeTimeout(time.Second)}, ""},
		"invalid node option":               {[]redlock.Option{redlock.WithNodeOptions(node.WithTimeout(-1))}, "timeout -1"},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := redlock.Dial(urls, tc.opts...)
			if tc.refused == "" {
				require.NoError(t, err)
				l, err := c.TryLock(ctxT(t, 5*time.Second), "twice")
				require.NoError(t, err)
				require.NoError(t, l.Release(ctxT(t, 5*time.Second)))
				require.NoError(t, c.Close())
				return
			}
			require.ErrorIs(t, err, redlock.ErrInvalid)
			assert.Contains(t, err.Error(), tc.refused)
		})
	}
}

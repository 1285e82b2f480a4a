package nodetest_test

import (
	"testing"

	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/nodetest"
	"github.com/redlock-go/redlock/redistest"
)

// TestRedis: the core's node passes the suite against a real redis-server,
// with the restart quarantine on as well.
func TestRedis(t *testing.T) {
	s := redistest.Start(t)
	for name, opts := range map[string][]node.Option{
		"default":    nil,
		"pipelined4": {node.WithConnections(4)},
	} {
		t.Run(name, func(t *testing.T) {
			nodetest.Run(t, func(t *testing.T) node.Node {
				n, err := node.Dial(s.URL(), opts...)
				if err != nil {
					t.Fatal(err)
				}
				return n
			}, nodetest.WithPause(func(t *testing.T) func() {
				s.Pause()
				return s.Resume
			}))
		})
	}
}

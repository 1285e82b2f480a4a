package redistest

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A server's port is outside the kernel's ephemeral range, so that no
// outgoing connection can take it as its local port while the server is
// killed (Restart failed with "Address already in use"), and never given out
// twice in a process.
func TestFreePortOutsideEphemeralRange(t *testing.T) {
	lo, hi := portRange()
	if lo == hi {
		t.Skip("the kernel's ephemeral range is unknown here")
	}
	seen := map[int]bool{}
	for range 200 {
		port, err := freePort()
		require.NoError(t, err)
		assert.GreaterOrEqual(t, port, lo)
		assert.Less(t, port, hi)
		assert.False(t, seen[port], "port %d given out twice", port)
		seen[port] = true
	}
	// An outgoing connection's local port comes from the ephemeral range:
	// never one freePort gives.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	for range 50 {
		c, err := net.Dial("tcp", l.Addr().String())
		require.NoError(t, err)
		_, p, _ := net.SplitHostPort(c.LocalAddr().String())
		local, _ := strconv.Atoi(p)
		assert.GreaterOrEqual(t, local, hi, "a local port below the ephemeral range: the premise of freePort does not hold")
		c.Close()
	}
}

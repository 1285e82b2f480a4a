package harness

import (
	"bufio"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestProxyForwardsPastDockerProxy checks that the proxy forwards to the
// container's own address (not the published port), and that a killed or
// disconnected node looks through the proxy as through the published port:
// open connections are closed at once and new ones are closed on accept, and
// the node is reachable again once Start or Reconnect returns.
func TestProxyForwardsPastDockerProxy(t *testing.T) {
	n := Start(t, 1, WithReuse()).Node(0)
	up := n.upstream()
	if os.Getenv(viaPortEnv) == "1" {
		require.Equal(t, n.Addr(), up)
	} else {
		require.NotEqual(t, n.Addr(), up, "the proxy goes through Docker's port publication")
		require.True(t, strings.HasSuffix(up, ":6379"), "upstream %s", up)
	}

	for _, fault := range []struct {
		name       string
		inject, up func() error
	}{
		{"kill", n.Kill, n.Start},
		{"stop", n.Stop, n.Start},
		{"disconnect", n.Disconnect, n.Reconnect},
	} {
		t.Run(fault.name, func(t *testing.T) {
			open := proxyPing(t, n.ProxyAddr())
			require.NoError(t, fault.inject())
			closedAt := time.Now()
			// The open connection was closed: a read sees EOF or a reset, not a timeout.
			require.NoError(t, open.SetReadDeadline(time.Now().Add(2*time.Second)))
			_, err := open.Read(make([]byte, 1))
			require.Error(t, err)
			require.False(t, isTimeout(err), "open connection not closed: %v", err)
			open.Close()
			// A new connection is accepted, then closed without an answer.
			c, err := net.DialTimeout("tcp", n.ProxyAddr(), time.Second)
			require.NoError(t, err)
			require.NoError(t, c.SetDeadline(time.Now().Add(2*time.Second)))
			_, err = c.Write([]byte("*1\r\n$4\r\nPING\r\n"))
			if err == nil {
				_, err = c.Read(make([]byte, 1))
			}
			c.Close()
			require.Error(t, err)
			require.False(t, isTimeout(err), "new connection not closed: %v", err)
			t.Logf("closed within %v of the fault", time.Since(closedAt))

			require.NoError(t, fault.up())
			proxyPing(t, n.ProxyAddr()).Close()
		})
	}
}

// proxyPing dials addr, sends PING, expects PONG and returns the connection.
func proxyPing(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	require.NoError(t, err)
	require.NoError(t, c.SetDeadline(time.Now().Add(2*time.Second)))
	_, err = c.Write([]byte("*1\r\n$4\r\nPING\r\n"))
	require.NoError(t, err)
	line, err := bufio.NewReader(c).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "+PONG\r\n", line)
	require.NoError(t, c.SetDeadline(time.Time{}))
	return c
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/gomodule/redigo/redis"
)

// dialTarget is everything needed to open one connection to a node.
type dialTarget struct {
	network, addr      string
	tls                *tls.Config // nil = plaintext
	username, password string
	db                 int
	timeout            time.Duration // read and write timeout of the connection
	limits             replyLimits   // zero = defaultLimits
	dialer             DialFunc      // nil = a net.Dialer
}

// targetFromURL builds the dial target of a parsed URL. tlsCfg is
// WithTLSConfig's (nil: the defaults, verifying the server's name).
func targetFromURL(u *URL, tlsCfg *tls.Config, timeout time.Duration) dialTarget {
	t := dialTarget{network: "tcp", addr: u.Addr(), username: u.Username, password: u.Password, db: u.DB, timeout: timeout}
	if u.TLS() {
		t.tls = &tls.Config{}
		if tlsCfg != nil {
			t.tls = tlsCfg.Clone()
		}
		if t.tls.ServerName == "" {
			t.tls.ServerName = u.Host
		}
	}
	return t
}

// dialConn opens a connection to t: TCP, the TLS handshake, AUTH and SELECT, all
// bounded by ctx (its deadline and its cancellation). The connection reads
// replies through the reply guard.
func dialConn(ctx context.Context, t dialTarget) (redis.Conn, error) {
	dial := t.dialer
	if dial == nil {
		var d net.Dialer
		dial = DialFunc(d.DialContext)
	}
	nc, err := dial(ctx, t.network, t.addr)
	if err != nil {
		return nil, fmt.Errorf("node: dial %s: %w", t.addr, err)
	}
	// Until the connection is ready, ctx bounds every read and write on it.
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	c, err := setUp(ctx, nc, t)
	if stopped := stop(); err != nil || !stopped {
		nc.Close()
		return nil, withCtxErr(ctx, err, t.addr)
	}
	_ = nc.SetDeadline(time.Time{})
	return c, nil
}

// setUp runs the TLS handshake, AUTH and SELECT on a fresh connection.
func setUp(ctx context.Context, nc net.Conn, t dialTarget) (redis.Conn, error) {
	if t.tls != nil {
		tc := tls.Client(nc, t.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, fmt.Errorf("node: TLS handshake with %s: %w", t.addr, err)
		}
		nc = tc
	}
	g := newGuard(nc, t.limits)
	c := redis.Conn(&guardedConn{Conn: redis.NewConn(g, t.timeout, t.timeout), g: g})
	if t.password != "" {
		args := []any{t.password}
		if t.username != "" {
			args = []any{t.username, t.password}
		}
		if _, err := redis.DoContext(c, ctx, "AUTH", args...); err != nil {
			return nil, fmt.Errorf("node: AUTH on %s: %w", t.addr, err)
		}
	}
	if t.db != 0 {
		if _, err := redis.DoContext(c, ctx, "SELECT", t.db); err != nil {
			return nil, fmt.Errorf("node: SELECT %d on %s: %w", t.db, t.addr, err)
		}
	}
	return c, nil
}

// withCtxErr makes a dial error that ctx caused reachable as ctx.Err().
func withCtxErr(ctx context.Context, err error, addr string) error {
	cerr := ctx.Err()
	switch {
	case cerr == nil || errors.Is(err, cerr):
		return err
	case err == nil:
		return fmt.Errorf("node: dial %s: %w", addr, cerr)
	default:
		return fmt.Errorf("%w (%w)", err, cerr)
	}
}

// replyAwaiter is a connection that can wait for a reply's first bytes
// without consuming them (the pipelining mux's lone commands).
type replyAwaiter interface {
	// setWait sets the read deadline of awaitReply; from another
	// goroutine, a time in the past cuts a wait short.
	setWait(deadline time.Time)
	// awaitReply waits until a reply's bytes have arrived, or an error that
	// the next read reports, and returns true; or until the read deadline
	// passes with nothing received, and returns false: the connection is
	// then intact, the reply still to be read.
	awaitReply() bool
}

// guardedConn is a redigo connection over a reply guard, which it can wait
// on (replyAwaiter).
type guardedConn struct {
	redis.Conn
	g *guardConn
}

var (
	_ redis.ConnWithContext = (*guardedConn)(nil)
	_ redis.ConnWithTimeout = (*guardedConn)(nil)
	_ replyAwaiter          = (*guardedConn)(nil)
)

func (c *guardedConn) setWait(deadline time.Time) { _ = c.g.Conn.SetReadDeadline(deadline) }

func (c *guardedConn) awaitReply() bool { return c.g.awaitReply() }

// DoContext implements redis.ConnWithContext.
func (c *guardedConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	return redis.DoContext(c.Conn, ctx, cmd, args...)
}

// ReceiveContext implements redis.ConnWithContext.
func (c *guardedConn) ReceiveContext(ctx context.Context) (any, error) {
	return redis.ReceiveContext(c.Conn, ctx)
}

// DoWithTimeout implements redis.ConnWithTimeout.
func (c *guardedConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	return redis.DoWithTimeout(c.Conn, d, cmd, args...)
}

// ReceiveWithTimeout implements redis.ConnWithTimeout.
func (c *guardedConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	return redis.ReceiveWithTimeout(c.Conn, d)
}

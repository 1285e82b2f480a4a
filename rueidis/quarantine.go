package rueidis

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	rd "github.com/redis/rueidis"

	"github.com/redlock-go/redlock/node"
)

// Quarantine is the restart and failover detector of one rueidis client, the
// counterpart of node.WithRestartQuarantine and of the goredis module's
// Quarantine (same rules): rueidis has no hook on new connections, so it wraps
// the client's dial function and reads INFO on every new connection before
// rueidis' own handshake. The node then refuses acquisitions
// (node.ErrQuarantined) for its duration after the server behind the client
// changed:
//
//	q, err := rueidisnode.NewQuarantine(11 * time.Second) // at least the longest TTL
//	opt := rueidis.ClientOption{InitAddress: sentinels, Sentinel: rueidis.SentinelOption{MasterSet: "locks"}}
//	opt.DialCtxFn = q.DialCtxFn(opt)
//	rc, err := rueidis.NewClient(opt)
//	n, err := rueidisnode.New(rc, rueidisnode.WithQuarantine(q))
//
// The rules, for the primary of each new connection: another run_id than
// before (a restart, another process: a *node.QuarantineError for the full
// duration); up less than the duration (what is left of it); the same run_id
// with another replication id, or the first primary seen that was once a
// replica (second_repl_offset is not -1): the full duration (a
// *FailoverError). Cluster masters are told apart by CLUSTER MYID; one
// quarantined master quarantines the whole node. Connections to replicas are
// refused (ErrReplica); sentinel connections are let through.
//
// The check authenticates with the option's Username and Password (not with
// AuthCredentialsFn), in RESP2, before rueidis' HELLO.
type Quarantine struct {
	g *node.FailoverGuard // the rules
}

// ErrReplica is the error (reachable with errors.Is) of a dial to a replica
// under a quarantine (node.ErrReplica): a connection kept to a replica would run
// the acquire script unchecked after the replica's promotion. A client with a
// quarantine must not send commands to replicas (SendToReplicas, ReplicaOnly).
var ErrReplica = node.ErrReplica

// FailoverError is the refusal of a node whose primary changed in a way its
// run_id does not show (node.FailoverError).
type FailoverError = node.FailoverError

// NewQuarantine returns a detector with quarantine d, in (0,
// node.MaxRestartQuarantine]; d should be at least the longest TTL any client
// uses on the node.
func NewQuarantine(d time.Duration) (*Quarantine, error) {
	g, err := node.NewFailoverGuard(d)
	if err != nil {
		return nil, err
	}
	return &Quarantine{g: g}, nil
}

// Quarantine returns the configured duration.
func (q *Quarantine) Quarantine() time.Duration { return q.g.Quarantine() }

// DialCtxFn returns a dial function for opt (set it as opt.DialCtxFn before
// rueidis.NewClient): it dials as opt would (with opt's own DialCtxFn, if any),
// then runs the check on the new connection, and fails the dial when INFO
// fails or the server is a replica.
func (q *Quarantine) DialCtxFn(opt rd.ClientOption) func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error) {
	base, user, pass := opt.DialCtxFn, opt.Username, opt.Password
	return func(ctx context.Context, dst string, d *net.Dialer, tc *tls.Config) (net.Conn, error) {
		var conn net.Conn
		var err error
		switch {
		case base != nil:
			conn, err = base(ctx, dst, d, tc)
		case tc != nil:
			conn, err = (&tls.Dialer{NetDialer: d, Config: tc}).DialContext(ctx, "tcp", dst)
		default:
			conn, err = d.DialContext(ctx, "tcp", dst)
		}
		if err != nil {
			return nil, err
		}
		if err := q.inspect(ctx, conn, user, pass); err != nil {
			conn.Close()
			return nil, err
		}
		return conn, nil
	}
}

// inspect sends AUTH (if a password is set), INFO server, INFO replication and
// CLUSTER MYID in one round trip, and observes the replies.
func (q *Quarantine) inspect(ctx context.Context, conn net.Conn, user, pass string) error {
	dl := time.Now().Add(5 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	if err := conn.SetDeadline(dl); err != nil {
		return err
	}
	defer conn.SetDeadline(time.Time{})
	var b bytes.Buffer
	write := func(args ...string) {
		fmt.Fprintf(&b, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	if pass != "" {
		if user != "" {
			write("AUTH", user, pass)
		} else {
			write("AUTH", pass)
		}
	}
	write("INFO", "server")
	write("INFO", "replication")
	write("CLUSTER", "MYID")
	if _, err := conn.Write(b.Bytes()); err != nil {
		return fmt.Errorf("rueidis: restart check: %w", err)
	}
	// Only the replies to these commands come back before rueidis writes: the
	// buffer reads nothing of what follows.
	r := bufio.NewReader(conn)
	if pass != "" {
		if _, err := readReply(r); err != nil && !isRedisError(err) {
			return fmt.Errorf("rueidis: restart check: AUTH: %w", err)
		} // an AUTH refusal is left to rueidis' handshake (a sentinel without one)
	}
	server, err1 := readReply(r)
	repl, err2 := readReply(r)
	id, err3 := readReply(r)
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("rueidis: restart check: INFO: %w", err)
	}
	if err3 != nil {
		if !isRedisError(err3) {
			return fmt.Errorf("rueidis: restart check: CLUSTER MYID: %w", err3)
		}
		id = "" // not a Cluster
	}
	return q.g.Observe(id, server, repl, time.Now())
}

type redisError string

func (e redisError) Error() string { return string(e) }

func isRedisError(err error) bool {
	var re redisError
	return errors.As(err, &re)
}

// readReply reads one RESP2 reply of the kinds the check gets: a simple
// string, an error, an integer or a bulk string.
func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("%w: empty reply line", node.ErrUnexpectedReply)
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", redisError(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < -1 || n > 1<<20 {
			return "", fmt.Errorf("%w: bulk length %q", node.ErrUnexpectedReply, line[1:])
		}
		if n == -1 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("%w: reply %q", node.ErrUnexpectedReply, line)
}

// Refusal returns the current quarantine (a *node.QuarantineError, possibly
// inside a *FailoverError; the one that lasts longest), or nil when the node
// may take part in acquisitions.
func (q *Quarantine) Refusal() error { return q.g.Refusal() }

// check is Refusal after a successful call, which needed a connection: if no
// connection was ever observed, DialCtxFn is not the client's dial function.
func (q *Quarantine) check() error {
	if !q.g.Observed() {
		return fmt.Errorf("%w: rueidis: the quarantine never saw a connection: set its DialCtxFn as the client's", node.ErrInvalidOption)
	}
	return q.Refusal()
}

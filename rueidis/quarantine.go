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
	"sync"
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
	d time.Duration

	mu        sync.Mutex
	primaries map[string]*primary // by CLUSTER MYID; "" outside a Cluster
	observed  bool
}

// ErrReplica is the error (reachable with errors.Is) of a dial to a replica
// under a quarantine: a connection kept to a replica would run the acquire
// script unchecked after the replica's promotion. A client with a quarantine
// must not send commands to replicas (SendToReplicas, ReplicaOnly).
var ErrReplica = errors.New("rueidis: connection refused")

// FailoverError is the refusal of a node whose primary changed in a way its
// run_id does not show (a promoted replica, a former primary back in charge):
// a *node.QuarantineError with the reason.
type FailoverError struct {
	// Reason says what was seen.
	Reason string
	*node.QuarantineError
}

func (e *FailoverError) Error() string {
	return fmt.Sprintf("%v: %s; it may lack lock keys the previous primary acknowledged, so it grants no lock until %s (in %v)",
		node.ErrQuarantined, e.Reason, e.Until.Format("15:04:05.000"), time.Until(e.Until).Round(time.Millisecond))
}

// Unwrap returns the *node.QuarantineError.
func (e *FailoverError) Unwrap() error { return e.QuarantineError }

type primary struct {
	guard         *node.RestartGuard
	runID, replid string
	forced        *FailoverError
}

// NewQuarantine returns a detector with quarantine d, in (0,
// node.MaxRestartQuarantine]; d should be at least the longest TTL any client
// uses on the node.
func NewQuarantine(d time.Duration) (*Quarantine, error) {
	if _, err := node.NewRestartGuard(d); err != nil {
		return nil, err
	}
	return &Quarantine{d: d, primaries: map[string]*primary{}}, nil
}

// Quarantine returns the configured duration.
func (q *Quarantine) Quarantine() time.Duration { return q.d }

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
	return q.observe(id, server, repl, time.Now())
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

func infoFields(text string, names ...string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		for _, n := range names {
			if k == n {
				out[k] = v
			}
		}
	}
	return out
}

func (q *Quarantine) observe(id, server, repl string, now time.Time) error {
	f := infoFields(server+"\n"+repl, "run_id", "uptime_in_seconds", "role", "master_replid", "second_repl_offset", "redis_mode")
	if f["redis_mode"] == "sentinel" {
		return nil
	}
	if f["run_id"] == "" || f["uptime_in_seconds"] == "" || f["role"] == "" {
		return fmt.Errorf("%w: restart check: INFO lacks run_id, uptime_in_seconds or role", node.ErrUnexpectedReply)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.observed = true
	if f["role"] != "master" {
		return fmt.Errorf("%w: a replica (role %s): with the quarantine, the client may only connect to primaries", ErrReplica, f["role"])
	}
	p := q.primaries[id]
	reason := ""
	if p == nil {
		g, _ := node.NewRestartGuard(q.d) // d was checked by NewQuarantine
		p = &primary{guard: g}
		q.primaries[id] = p
		if o := f["second_repl_offset"]; o != "" && o != "-1" {
			reason = "the primary was once a replica (a failover promoted it, when is unknown)"
		}
	} else if f["run_id"] == p.runID && f["master_replid"] != p.replid {
		reason = "the primary's replication id changed (it was a replica, and is primary again)"
	}
	p.runID, p.replid = f["run_id"], f["master_replid"]
	if err := p.guard.Observe(server, now); err != nil {
		return err
	}
	if reason != "" {
		up, _ := time.ParseDuration(f["uptime_in_seconds"] + "s")
		e := &FailoverError{Reason: reason, QuarantineError: &node.QuarantineError{
			RunID: f["run_id"], Uptime: up, Until: now.Add(q.d), Quarantine: q.d,
		}}
		if p.forced == nil || e.Until.After(p.forced.Until) {
			p.forced = e
		}
	}
	return nil
}

// Refusal returns the current quarantine (a *node.QuarantineError, possibly
// inside a *FailoverError; the one that lasts longest), or nil when the node
// may take part in acquisitions.
func (q *Quarantine) Refusal() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := time.Now()
	var worst error
	var until time.Time
	for _, p := range q.primaries {
		var qe *node.QuarantineError
		if errors.As(p.guard.Refusal(), &qe) && qe.Until.After(until) {
			worst, until = qe, qe.Until
		}
		if e := p.forced; e != nil && now.Before(e.Until) && !e.Until.Before(until) {
			worst, until = e, e.Until
		}
	}
	return worst
}

// check is Refusal after a successful call, which needed a connection: if no
// connection was ever observed, DialCtxFn is not the client's dial function.
func (q *Quarantine) check() error {
	q.mu.Lock()
	observed := q.observed
	q.mu.Unlock()
	if !observed {
		return fmt.Errorf("%w: rueidis: the quarantine never saw a connection: set its DialCtxFn as the client's", node.ErrInvalidOption)
	}
	return q.Refusal()
}

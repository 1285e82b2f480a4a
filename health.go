package redlock

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redlock-go/redlock/node"
)

// DefaultBreakerFailures is how many calls in a row a node must fail (by timing
// out, or at the transport) before its breaker opens.
const DefaultBreakerFailures = 3

// maxPendingReleases bounds the cleanup releases kept for one down node; beyond
// it they are dropped, and those keys expire by their TTL.
const maxPendingReleases = 1024

// healthLogEvery bounds the logs of a node's state changes: at most one per
// node and state in this time.
const healthLogEvery = 10 * time.Second

// refuser is implemented by nodes that can tell their current restart
// quarantine (*node.Redis: node.WithRestartQuarantine, node.WithRestartGuard).
type refuser interface{ Refusal() error }

// NodeState is a node's health state, as Client.Health and the OnNodeHealth
// hook report it.
type NodeState string

// The states of a node, from the calls the client made to it.
const (
	// NodeOK: the node's last call was answered (a refusal of the lock is an
	// answer), or no call was made yet.
	NodeOK NodeState = "ok"
	// NodeFailing: the node's last call failed (NodeHealth.LastErrorKind says
	// how), since NodeHealth.FailingSince. Its vote is lost: with it, the
	// client tolerates one failure fewer.
	NodeFailing NodeState = "failing"
	// NodeQuarantined: the node refuses acquisitions after a restart (see
	// node.WithRestartQuarantine) until NodeHealth.QuarantinedUntil.
	NodeQuarantined NodeState = "quarantined"
	// NodeBreakerOpen: the node failed DefaultBreakerFailures calls (see
	// WithBreaker) in a row at the transport; calls to it fail at once with
	// ErrNodeDown until a background probe sees it answer.
	NodeBreakerOpen NodeState = "breaker-open"
)

// The kinds of error NodeHealth.LastErrorKind reports (NodeErrorKind): a digest
// of the error, never its text, which may carry a key, a token or a password.
const (
	KindTimeout      = "timeout"       // the node did not answer within the node timeout
	KindRefused      = "refused"       // connection refused: nothing listens
	KindConnection   = "connection"    // another network error: reset, broken pipe, unreachable, EOF
	KindAuth         = "auth"          // the credentials were refused (WRONGPASS, NOAUTH)
	KindPermission   = "permission"    // an ACL refused a command (NOPERM)
	KindTLS          = "tls"           // the TLS handshake failed (certificate, server name)
	KindSameInstance = "same-instance" // the same Redis process as another node (node.ErrSameInstance)
	KindQuarantined  = "quarantined"   // a restart quarantine refused an acquisition (node.ErrQuarantined)
	KindReply        = "reply"         // a reply the client cannot use (too large, malformed, unexpected)
	KindRedis        = "redis"         // another error reply from the server
	KindOther        = "other"         // anything else
)

// NodeErrorKind classifies an error of a node call into one of the Kind
// constants ("" for nil): what Client.Health reports of it.
func NodeErrorKind(err error) string {
	var (
		ne   net.Error
		qe   *node.QuarantineError
		cve  *tls.CertificateVerificationError
		rhe  tls.RecordHeaderError
		uae  x509.UnknownAuthorityError
		hne  x509.HostnameError
		cie  x509.CertificateInvalidError
		text string
	)
	if err != nil {
		text = err.Error()
	}
	switch {
	case err == nil:
		return ""
	case errors.Is(err, node.ErrQuarantined) || errors.As(err, &qe):
		return KindQuarantined
	case errors.Is(err, node.ErrSameInstance):
		return KindSameInstance
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return KindTimeout
	case errors.Is(err, syscall.ECONNREFUSED):
		return KindRefused
	case errors.As(err, &cve) || errors.As(err, &rhe) || errors.As(err, &uae) || errors.As(err, &hne) || errors.As(err, &cie) ||
		strings.Contains(text, "TLS handshake"):
		return KindTLS
	case errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE):
		return KindConnection
	case strings.Contains(text, "WRONGPASS") || strings.Contains(text, "NOAUTH") ||
		strings.Contains(text, "invalid password") || strings.Contains(text, "invalid username-password"):
		return KindAuth
	case isPermission(text):
		return KindPermission
	case errors.Is(err, node.ErrReplyTooLarge) || errors.Is(err, node.ErrMalformedReply) || errors.Is(err, node.ErrUnexpectedReply):
		return KindReply
	case strings.Contains(text, "ERR ") || strings.HasPrefix(text, "ERR") || strings.Contains(text, "OOM") ||
		strings.Contains(text, "BUSY") || strings.Contains(text, "READONLY") || strings.Contains(text, "LOADING"):
		return KindRedis
	}
	return KindOther
}

// NodeHealth is one node's health as the client saw it in its calls (every
// operation's, and the breaker's probes). Times are on the client's clock
// (WithClock); a zero time means never, or not now.
type NodeHealth struct {
	// Node is the node's name (node.Node.Name: host:port/db for dialed nodes,
	// without credentials).
	Node string
	// State sums the rest up; see NodeState. The most severe applies:
	// breaker-open, quarantined, failing, ok.
	State NodeState
	// FailingSince is when the node's current run of failed calls began; zero
	// when its last call was answered.
	FailingSince time.Time
	// Failures counts its failed calls in a row.
	Failures int
	// QuarantinedUntil is when its restart quarantine ends, while it lasts.
	QuarantinedUntil time.Time
	// BreakerOpenUntil, while the breaker is open, is when the next probe
	// runs: the earliest the node is asked again.
	BreakerOpenUntil time.Time
	// LastErrorKind classifies its last error (see NodeErrorKind), whenever
	// it happened (LastError); "" if none.
	LastErrorKind string
	// LastError is when its last error happened; LastOK when its last call
	// was answered.
	LastError, LastOK time.Time
}

// NodeHealthEvent reports a change of a node's health state: the node's
// health just after it, and the state before.
type NodeHealthEvent struct {
	NodeHealth
	// From is the state before the change.
	From NodeState
}

// nodeHealth is everything the client knows of one node's health, in one
// record: what Health reports, and the node's circuit breaker, in the spirit of sony/gobreaker: closed while the
// node answers; open, failing calls fast with ErrNodeDown, once threshold calls
// in a row failed at the transport; closed again by a background probe (or any
// call in flight) that sees the node answer. Cleanup releases for an open node
// wait in pending, deduplicated and bounded, and are sent once it is closed: no
// goroutine waits per failed attempt.
type nodeHealth struct {
	threshold  int           // breaker: 0 = no breaker (WithBreaker(0))
	base, ceil time.Duration // the probe's backoff: from base, doubling to ceil

	mu sync.Mutex
	// The calls' outcomes.
	failingSince     time.Time // first failure since the last answer; zero if answered
	failures         int       // failed calls in a row
	quarantinedUntil time.Time
	lastKind         string
	lastErr, lastOK  time.Time
	// The breaker.
	fails     int // consecutive transport failures
	open      bool
	nextProbe time.Time
	probing   bool // a probe goroutine runs
	pending   map[pendingRelease]tell
	dropped   int
	// Reporting: the state last reported, and when each state was last logged.
	state  NodeState
	logged map[NodeState]time.Time
}

type pendingRelease struct{ key, token string }

// newNodeHealth returns a node's record; threshold 0 means no breaker.
func newNodeHealth(threshold int, nodeTimeout time.Duration) *nodeHealth {
	ceil := min(max(2*nodeTimeout, 100*time.Millisecond), time.Second)
	return &nodeHealth{threshold: threshold, base: min(nodeTimeout, ceil), ceil: ceil, state: NodeOK}
}

// allow reports whether a call may be sent.
func (h *nodeHealth) allow() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.open
}

// record counts the outcome of a call made at now. It reports whether a probe
// must start (the breaker opened and no probe runs), and the state change it
// caused, if any. Any answer closes the breaker.
func (h *nodeHealth) record(err error, now time.Time) (probe bool, change *NodeHealthEvent) {
	if errors.Is(err, context.Canceled) {
		return false, nil // given up by the client: nothing learnt about the node
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case err == nil:
		h.failingSince, h.failures, h.lastOK = time.Time{}, 0, now
	case quarantined(err) != nil:
		// Refused before anything was sent: the node is up, but grants
		// nothing until then.
		h.failingSince, h.failures = time.Time{}, 0
		h.quarantinedUntil = later(h.quarantinedUntil, quarantined(err).Until)
		h.lastKind, h.lastErr = KindQuarantined, now
	default:
		if h.failingSince.IsZero() {
			h.failingSince = now
		}
		h.failures++
		h.lastKind, h.lastErr = NodeErrorKind(err), now
	}
	if h.threshold > 0 {
		probe = h.recordBreakerLocked(err, now)
	}
	return probe, h.changedLocked(now)
}

// quarantined returns err's restart quarantine, if it is one. (Apart from
// record, so that a call that succeeded allocates nothing for errors.As.)
func quarantined(err error) *node.QuarantineError {
	var qe *node.QuarantineError
	if errors.As(err, &qe) {
		return qe
	}
	return nil
}

// recordBreakerLocked is record's part for the breaker.
func (h *nodeHealth) recordBreakerLocked(err error, now time.Time) (probe bool) {
	if !transportFailure(err) {
		h.fails = 0
		h.open = false
		return false
	}
	h.fails++
	if h.fails >= h.threshold && !h.open {
		h.open, h.nextProbe = true, now.Add(h.base)
	}
	if !h.open || h.probing {
		return false
	}
	h.probing = true
	return true
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// stateLocked is the node's state at now.
func (h *nodeHealth) stateLocked(now time.Time) NodeState {
	switch {
	case h.open:
		return NodeBreakerOpen
	case now.Before(h.quarantinedUntil):
		return NodeQuarantined
	case !h.failingSince.IsZero():
		return NodeFailing
	}
	return NodeOK
}

// snapshotLocked returns the record as Health reports it.
func (h *nodeHealth) snapshotLocked(now time.Time) NodeHealth {
	s := NodeHealth{State: h.stateLocked(now), FailingSince: h.failingSince, Failures: h.failures,
		LastErrorKind: h.lastKind, LastError: h.lastErr, LastOK: h.lastOK}
	if now.Before(h.quarantinedUntil) {
		s.QuarantinedUntil = h.quarantinedUntil
	}
	if h.open {
		s.BreakerOpenUntil = h.nextProbe
	}
	return s
}

// changedLocked returns the event of a state change since the last one
// reported, if any, and records the new state as reported.
func (h *nodeHealth) changedLocked(now time.Time) *NodeHealthEvent {
	s := h.snapshotLocked(now)
	if s.State == h.state {
		return nil
	}
	ev := &NodeHealthEvent{NodeHealth: s, From: h.state}
	h.state = s.State
	return ev
}

// shouldLog reports whether a change to state may be logged at now (at most
// once per state in healthLogEvery), and notes it.
func (h *nodeHealth) shouldLog(state NodeState, now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if last, ok := h.logged[state]; ok && now.Sub(last) < healthLogEvery {
		return false
	}
	if h.logged == nil {
		h.logged = map[NodeState]time.Time{}
	}
	h.logged[state] = now
	return true
}

// setNextProbe records when the probe asks the node next.
func (h *nodeHealth) setNextProbe(t time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.nextProbe = t
}

// deferRelease queues a cleanup release while the breaker is open; it reports false
// when the breaker is closed (the caller sends the release itself).
func (h *nodeHealth) deferRelease(key, token string, t tell) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.open {
		return false
	}
	if h.pending == nil {
		h.pending = map[pendingRelease]tell{}
	}
	k := pendingRelease{key, token}
	if _, ok := h.pending[k]; !ok && len(h.pending) >= maxPendingReleases {
		h.dropped++
		return true
	}
	h.pending[k] = max(h.pending[k], t)
	return true
}

// answered closes the breaker on a probe's answer at now, and returns the
// releases that waited for it and the state change.
func (h *nodeHealth) answered(now time.Time) (map[pendingRelease]tell, int, *NodeHealthEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.open, h.fails, h.probing = false, 0, false
	h.failingSince, h.failures, h.lastOK = time.Time{}, 0, now
	p, d := h.pending, h.dropped
	h.pending, h.dropped = nil, 0
	return p, d, h.changedLocked(now)
}

func (h *nodeHealth) isOpen() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.open
}

// transportFailure reports whether err says the node did not answer: a timeout,
// a refused or broken connection, or a reply that could not be read. An error
// reply from Redis, or a refusal such as a restart quarantine, means the node
// is up.
func transportFailure(err error) bool {
	if err == nil || errors.Is(err, node.ErrQuarantined) {
		return false
	}
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) ||
		errors.Is(err, node.ErrReplyTooLarge) || errors.Is(err, node.ErrMalformedReply) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// recordCall records the outcome of a call to node i (roundRunner.Run's
// second half, the first being c.health[i].allow()).
func (c *Client) recordCall(i int, err error) {
	probe, change := c.health[i].record(err, c.cfg.clock.Now())
	c.healthChanged(i, change)
	if probe {
		c.spawn(func() { c.probe(i) })
	}
}

// probe pings node i, with a growing backoff, until it answers or the client
// closes; then it closes the breaker and sends the releases that waited.
func (c *Client) probe(i int) {
	h, p := c.health[i], c.nodes[i]
	wait := h.base
	for h.isOpen() {
		// No jitter: one probe per node and client is no herd, and runs stay
		// reproducible (sim/).
		h.setNextProbe(c.cfg.clock.Now().Add(wait))
		t := time.NewTimer(wait)
		select {
		case <-c.stop:
			t.Stop()
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(c.cleanup, c.cfg.nodeTimeout) // Close cancels it
		err := p.Ping(ctx)
		cancel()
		if err == nil {
			break
		}
		wait = min(2*wait, h.ceil)
	}
	pending, dropped, change := h.answered(c.cfg.clock.Now())
	c.logNode(slog.LevelInfo, "node answers again", i, "pending_releases", len(pending), "dropped_releases", dropped)
	c.healthChanged(i, change)
	for k, w := range pending {
		c.releaseNow(i, k.key, k.token, "", w, nil)
	}
}

// healthChanged reports a change of node i's state, if any: to the
// OnNodeHealth hook, and in a log (at most one per node and state in
// healthLogEvery).
func (c *Client) healthChanged(i int, ev *NodeHealthEvent) {
	if ev == nil {
		return
	}
	ev.Node = c.nodes[i].Name()
	if hook := c.cfg.hooks.OnNodeHealth; hook != nil {
		hook(*ev)
	}
	if c.cfg.logger == nil || !c.health[i].shouldLog(ev.State, c.cfg.clock.Now()) {
		return
	}
	args := []any{"state", string(ev.State), "from", string(ev.From)}
	if ev.LastErrorKind != "" {
		args = append(args, "last_error_kind", ev.LastErrorKind)
	}
	switch ev.State {
	case NodeOK:
		if ev.From == NodeBreakerOpen {
			return // the probe logs it, with the releases that waited
		}
		c.logNode(slog.LevelInfo, "node healthy again", i, args...)
	case NodeFailing:
		c.logNode(slog.LevelWarn, "node failing: its vote is lost, the client tolerates one failure fewer", i,
			append(args, "failing_since", ev.FailingSince)...)
	case NodeQuarantined:
		c.logNode(slog.LevelWarn, "node quarantined after a restart: it grants no lock until the quarantine ends", i,
			append(args, "until", ev.QuarantinedUntil)...)
	case NodeBreakerOpen:
		c.logNode(slog.LevelWarn, "node down: failing fast until it answers a probe", i,
			append(args, "failing_since", ev.FailingSince)...)
	}
}

// Health returns the health of every node, in the order the client was given
// them: what the client saw in its calls, and a restart quarantine the node
// reports itself (node.Redis.Refusal). It makes no call. A node that was
// never called is NodeOK.
func (c *Client) Health() []NodeHealth {
	now := c.cfg.clock.Now()
	out := make([]NodeHealth, len(c.nodes))
	for i, n := range c.nodes {
		h := c.health[i]
		if r, ok := n.(refuser); ok {
			var qe *node.QuarantineError
			if errors.As(r.Refusal(), &qe) {
				h.mu.Lock()
				h.quarantinedUntil = later(h.quarantinedUntil, qe.Until)
				h.mu.Unlock()
			}
		}
		h.mu.Lock()
		out[i] = h.snapshotLocked(now)
		h.mu.Unlock()
		out[i].Node = n.Name()
	}
	return out
}

// logNode logs an event of node i.
func (c *Client) logNode(level slog.Level, msg string, i int, args ...any) {
	l := c.cfg.logger
	if l == nil || !l.Enabled(context.Background(), level) {
		return
	}
	l.Log(context.Background(), level, msg, append([]any{"node", c.nodes[i].Name()}, args...)...)
}

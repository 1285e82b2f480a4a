package redlock

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
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

// Pinger is implemented by nodes that can be probed (*node.Redis is). Only such
// nodes get a circuit breaker.
type Pinger interface {
	Ping(ctx context.Context) error
}

// breaker is one node's circuit breaker, in the spirit of sony/gobreaker:
// closed while the node answers; open, failing calls fast with ErrNodeDown,
// once threshold calls in a row failed at the transport; closed again by a
// background probe (or any call in flight) that sees the node answer. Cleanup
// releases for an open node wait in pending, deduplicated and bounded, and are
// sent once it is closed: no goroutine waits per failed attempt.
type breaker struct {
	threshold  int
	base, ceil time.Duration // the probe's backoff: from base, doubling to ceil

	mu      sync.Mutex
	fails   int // consecutive transport failures
	open    bool
	probing bool                    // a probe goroutine runs
	pending map[pendingRelease]bool // -> notify
	dropped int
}

type pendingRelease struct{ key, token string }

func newBreaker(threshold int, nodeTimeout time.Duration) *breaker {
	ceil := min(max(2*nodeTimeout, 100*time.Millisecond), time.Second)
	return &breaker{threshold: threshold, base: min(nodeTimeout, ceil), ceil: ceil}
}

// allow reports whether a call may be sent.
func (b *breaker) allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.open
}

// record counts the outcome of a call and reports whether a probe must start
// (the breaker is open and no probe runs). Any answer closes the breaker.
func (b *breaker) record(err error) (opened bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !transportFailure(err) {
		b.fails = 0
		b.open = false
		return false
	}
	b.fails++
	if b.fails >= b.threshold {
		b.open = true
	}
	if !b.open || b.probing {
		return false
	}
	b.probing = true
	return true
}

// deferRelease queues a cleanup release while the breaker is open; it reports false
// when the breaker is closed (the caller sends the release itself).
func (b *breaker) deferRelease(key, token string, notify bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open {
		return false
	}
	if b.pending == nil {
		b.pending = map[pendingRelease]bool{}
	}
	k := pendingRelease{key, token}
	if _, ok := b.pending[k]; !ok && len(b.pending) >= maxPendingReleases {
		b.dropped++
		return true
	}
	b.pending[k] = b.pending[k] || notify
	return true
}

// closeAndTake closes the breaker and returns the releases that waited for it.
func (b *breaker) closeAndTake() (map[pendingRelease]bool, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.open, b.fails, b.probing = false, 0, false
	p, d := b.pending, b.dropped
	b.pending, b.dropped = nil, 0
	return p, d
}

func (b *breaker) isOpen() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.open
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

// callNode runs call on node i through its breaker.
func callNode[T any](c *Client, ctx context.Context, i int, call func(context.Context, int, node.Node) (T, bool, error)) (T, bool, error) {
	b := c.breakers[i]
	if b == nil {
		return call(ctx, i, c.nodes[i])
	}
	if !b.allow() {
		var zero T
		return zero, false, ErrNodeDown
	}
	v, ok, err := call(ctx, i, c.nodes[i])
	if err == errNotSent { // nothing was sent: nothing learnt about the node
		return v, ok, err
	}
	if b.record(err) {
		c.logNode(slog.LevelWarn, "node down: failing fast until it answers a probe", i, "err", err)
		c.spawn(func() { c.probe(i) })
	}
	return v, ok, err
}

// probe pings node i, with a growing backoff, until it answers or the client
// closes; then it closes the breaker and sends the releases that waited.
func (c *Client) probe(i int) {
	b, p := c.breakers[i], c.nodes[i].(Pinger)
	wait := b.base
	for b.isOpen() {
		// No jitter: one probe per node and client is no herd, and runs stay
		// reproducible (sim/).
		t := time.NewTimer(wait)
		select {
		case <-c.stop:
			t.Stop()
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.nodeTimeout)
		err := p.Ping(ctx)
		cancel()
		if err == nil {
			break
		}
		wait = min(2*wait, b.ceil)
	}
	pending, dropped := b.closeAndTake()
	c.logNode(slog.LevelInfo, "node answers again", i, "pending_releases", len(pending), "dropped_releases", dropped)
	for k, notify := range pending {
		c.releaseNow(i, k.key, k.token, "", notify)
	}
}

// logNode logs an event of node i.
func (c *Client) logNode(level slog.Level, msg string, i int, args ...any) {
	l := c.cfg.logger
	if l == nil || !l.Enabled(context.Background(), level) {
		return
	}
	l.Log(context.Background(), level, msg, append([]any{"node", c.nodes[i].Name()}, args...)...)
}

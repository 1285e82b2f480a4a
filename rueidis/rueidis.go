// Package rueidis makes a rueidis client a lock node (node.Node), so that a
// service that already holds a rueidis client takes Redlock locks over it. Its
// name clashes with the client's own package; import it under another name:
//
//	import (
//		"github.com/redis/rueidis"
//		rueidisnode "github.com/redlock-go/redlock/rueidis"
//	)
//
//	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"10.0.0.1:6379"}})
//	n, err := rueidisnode.New(rc)
//	client, err := redlock.New([]node.Node{n, n2, n3})
//
// A node may be a plain server, a Sentinel-managed primary or a Redis Cluster
// client (one node, one vote);
// Redlock's N nodes must be independent of each other. The lock and fence keys
// of a resource carry a hash tag, so the scripts run in one slot of a Cluster.
// A failover loses what the primary had not yet replicated, lock keys
// included, exactly like a restart without persistence: Quarantine (set up
// through the client's dial function) makes the node refuse acquisitions for
// the TTL after its primary changed.
//
// The package lives in a module of its own so that the core module does not
// depend on rueidis.
package rueidis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	rd "github.com/redis/rueidis"

	"github.com/redlock-go/redlock/node"
)

// Node is a node.Node over a rueidis client. It is safe for concurrent use.
type Node struct {
	c       rd.Client
	name    string
	timeout time.Duration
	q       *Quarantine

	mu      sync.Mutex
	watches map[*watch]struct{}
	closed  bool
}

var (
	_ node.Node    = (*Node)(nil)
	_ node.Watcher = (*Node)(nil)
)

// Option configures New.
type Option func(*config) error

type config struct {
	name    string
	timeout time.Duration
	q       *Quarantine
}

// WithQuarantine makes the node refuse acquisitions while q says its server
// restarted or its primary changed less than q's duration ago. q's DialCtxFn
// must be the client's dial function: see Quarantine.
func WithQuarantine(q *Quarantine) Option {
	return func(c *config) error {
		if q == nil {
			return fmt.Errorf("%w: nil quarantine", node.ErrInvalidOption)
		}
		c.q = q
		return nil
	}
}

// WithName sets the node's name (by default "rueidis/" and the lowest address
// the client knows).
func WithName(name string) Option {
	return func(c *config) error {
		if strings.TrimSpace(name) == "" {
			return fmt.Errorf("%w: empty node name", node.ErrInvalidOption)
		}
		c.name = name
		return nil
	}
}

// WithTimeout bounds each call to d besides the context's deadline (default
// node.DefaultTimeout; see node.CheckTimeout).
func WithTimeout(d time.Duration) Option {
	return func(c *config) error {
		if err := node.CheckTimeout(d); err != nil {
			return err
		}
		c.timeout = d
		return nil
	}
}

// New returns a node over c. Close does not close c.
func New(c rd.Client, opts ...Option) (*Node, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil client", node.ErrInvalidOption)
	}
	cfg := config{timeout: node.DefaultTimeout}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	name := cfg.name
	if name == "" {
		addrs := make([]string, 0, 1)
		for a := range c.Nodes() {
			addrs = append(addrs, a)
		}
		slices.Sort(addrs)
		name = "rueidis"
		if len(addrs) > 0 {
			name += "/" + addrs[0]
		}
	}
	return &Node{c: c, name: name, timeout: cfg.timeout, q: cfg.q, watches: map[*watch]struct{}{}}, nil
}

// Name implements node.Node.
func (n *Node) Name() string { return n.name }

// Close implements node.Node: it ends the node's watches, and leaves the client
// open.
func (n *Node) Close() error {
	n.mu.Lock()
	n.closed = true
	ws := n.watches
	n.watches = map[*watch]struct{}{}
	n.mu.Unlock()
	for w := range ws {
		w.stop()
	}
	return nil
}

var (
	acquireScript    = rd.NewLuaScript(node.AcquireScript.Source())
	releaseScript    = rd.NewLuaScript(node.ReleaseScript.Source())
	extendScript     = rd.NewLuaScript(node.ExtendScript.Source())
	writeFenceScript = rd.NewLuaScript(node.WriteFenceScript.Source())
	raiseFenceScript = rd.NewLuaScript(node.RaiseFenceScript.Source())
)

// run runs s (EVALSHA, then EVAL on NOSCRIPT), bounded by ctx and the timeout.
func (n *Node) run(ctx context.Context, s *rd.Lua, keys []string, args ...string) (rd.RedisResult, error) {
	if err := ctx.Err(); err != nil {
		return rd.RedisResult{}, err
	}
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > n.timeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, n.timeout)
		defer cancel()
	}
	r := s.Exec(ctx, n.c, keys, args)
	return r, r.Error()
}

func (n *Node) flag(ctx context.Context, s *rd.Lua, keys []string, args ...string) (bool, error) {
	r, err := n.run(ctx, s, keys, args...)
	if err != nil {
		return false, err
	}
	i, err := r.AsInt64()
	if err != nil {
		return false, fmt.Errorf("%w: %v", node.ErrUnexpectedReply, err)
	}
	return i == 1, nil
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// Acquire implements node.Node. While the node is quarantined it returns a
// *node.QuarantineError without sending anything; when the call itself found
// the node restarted or failed over (a new connection), a lock it took is
// deleted again and the quarantine is returned.
func (n *Node) Acquire(ctx context.Context, key, fenceKey, token string, ttl time.Duration) (node.Acquired, error) {
	if n.q != nil {
		if err := n.q.Refusal(); err != nil {
			return node.Acquired{}, err
		}
	}
	a, err := n.acquire(ctx, key, fenceKey, token, ttl)
	if err != nil || !a.OK || n.q == nil {
		return a, err
	}
	if err := n.q.check(); err != nil {
		// The SET went to a process the quarantine refuses: take it back.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.timeout)
		defer cancel()
		_, _ = n.Release(uctx, key, token, false)
		return node.Acquired{}, err
	}
	return a, nil
}

func (n *Node) acquire(ctx context.Context, key, fenceKey, token string, ttl time.Duration) (node.Acquired, error) {
	r, err := n.run(ctx, acquireScript, []string{key, fenceKey}, token, ms(ttl))
	if err != nil {
		return node.Acquired{}, err
	}
	vals, err := r.ToArray()
	if err != nil || len(vals) != 3 {
		return node.Acquired{}, fmt.Errorf("%w: acquire: %v", node.ErrUnexpectedReply, r)
	}
	ok, err1 := vals[0].AsInt64()
	fence, err2 := vals[1].ToString()
	present, err3 := vals[2].AsInt64()
	if err := errors.Join(err1, err2, err3); err != nil {
		return node.Acquired{}, fmt.Errorf("%w: acquire: %v", node.ErrUnexpectedReply, err)
	}
	return node.ParseAcquired(ok, fence, present)
}

// Release implements node.Node.
func (n *Node) Release(ctx context.Context, key, token string, notify bool) (bool, error) {
	flag := "0"
	if notify {
		flag = "1"
	}
	return n.flag(ctx, releaseScript, []string{key}, token, flag)
}

// Extend implements node.Node.
func (n *Node) Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	return n.flag(ctx, extendScript, []string{key}, token, ms(ttl))
}

// WriteFence implements node.Node.
func (n *Node) WriteFence(ctx context.Context, key, fenceKey, token string, fence uint64) (bool, error) {
	return n.flag(ctx, writeFenceScript, []string{key, fenceKey}, token, strconv.FormatUint(fence, 10))
}

// RaiseFence implements node.Node.
func (n *Node) RaiseFence(ctx context.Context, fenceKey string, fence uint64) error {
	_, err := n.flag(ctx, raiseFenceScript, []string{fenceKey}, strconv.FormatUint(fence, 10))
	return err
}

type watch struct {
	ch     chan struct{}
	cancel context.CancelFunc
	once   sync.Once
	n      *Node
}

func (w *watch) poke() {
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

func (w *watch) stop() {
	w.once.Do(func() {
		w.cancel()
		w.n.mu.Lock()
		delete(w.n.watches, w)
		w.n.mu.Unlock()
	})
}

// Watch implements node.Watcher with rueidis' Receive, which shares the
// client's connection and re-subscribes after a reconnection. The channel is
// poked after every release notification and every re-subscription (a release
// may have been missed meanwhile).
func (n *Node) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	wctx, cancel := context.WithCancel(context.Background())
	w := &watch{ch: make(chan struct{}, 1), cancel: cancel, n: n}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		cancel()
		return nil, nil, errors.New("rueidis: node closed")
	}
	n.watches[w] = struct{}{}
	n.mu.Unlock()
	confirmed := make(chan struct{})
	var first sync.Once
	hctx := rd.WithOnSubscriptionHook(wctx, func(s rd.PubSubSubscription) {
		if s.Kind != "subscribe" {
			return
		}
		confirmedNow := false
		first.Do(func() { close(confirmed); confirmedNow = true })
		if !confirmedNow {
			w.poke()
		}
	})
	go func() {
		for backoff := 50 * time.Millisecond; wctx.Err() == nil; backoff = min(2*backoff, 2*time.Second) {
			_ = n.c.Receive(hctx, n.c.B().Subscribe().Channel(key).Build(), func(rd.PubSubMessage) { w.poke() })
			if wctx.Err() != nil {
				return
			}
			w.poke() // the subscription ended: a release may be missed until it is back
			select {
			case <-time.After(backoff):
			case <-wctx.Done():
			}
		}
	}()
	select {
	case <-confirmed:
		return w.ch, w.stop, nil
	case <-ctx.Done():
		return w.ch, w.stop, ctx.Err()
	}
}

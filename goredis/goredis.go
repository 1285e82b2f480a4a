// Package goredis makes a go-redis v9 client a lock node (node.Node), so that a
// service that already holds a go-redis client takes Redlock locks over it:
//
//	rdb := redis.NewClient(&redis.Options{Addr: "10.0.0.1:6379", ContextTimeoutEnabled: true})
//	n, err := goredis.New(rdb)
//	client, err := redlock.New([]node.Node{n, n2, n3})
//
// A node may be a plain server (*redis.Client), a Sentinel-managed primary
// (redis.NewFailoverClient, also a *redis.Client) or a Redis Cluster
// (*redis.ClusterClient): one node, one vote, whatever is behind it. Redlock's N
// nodes must still be independent of each other. The lock and fence keys of a
// resource carry a hash tag, so the scripts run in one slot of a Cluster.
//
// A failover loses what the primary had not yet replicated, lock keys
// included, exactly like a restart without persistence. Quarantine (see
// NewQuarantine) makes the node refuse acquisitions for the TTL after its
// primary changed, as node.WithRestartQuarantine does for the core's nodes.
//
// The package lives in a module of its own so that the core module does not
// depend on go-redis.
package goredis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/node"
)

// Node is a node.Node over a go-redis client, with every operation of the
// core's nodes (node.Scripted: the same scripts, the waiters'
// queue) and Watch and Ping. It is safe for concurrent use.
type Node struct {
	node.Scripted
	c       redis.UniversalClient
	name    string
	timeout time.Duration
	q       *Quarantine

	sub *subscriber // every watch, but on a ClusterClient (subscriberFor)

	subsMu sync.Mutex
	subs   map[string]*subscriber // ClusterClient: one per master, by address
	closed bool
}

var (
	_ node.Node    = (*Node)(nil)
	_ node.Watcher = (*Node)(nil)
	_ node.Queuer  = (*Node)(nil)
)

// Option configures New.
type Option func(*config) error

type config struct {
	name    string
	timeout time.Duration
	q       *Quarantine
}

// WithName sets the node's name (by default the client's address and database,
// "sentinel/" and the database for a FailoverClient, "cluster/" and the
// first seed address for a ClusterClient).
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

// WithQuarantine makes the node refuse acquisitions while q says its server
// restarted or its primary changed less than q's duration ago. q's OnConnect
// must be the client's OnConnect hook: see NewQuarantine.
func WithQuarantine(q *Quarantine) Option {
	return func(c *config) error {
		if q == nil {
			return fmt.Errorf("%w: nil quarantine", node.ErrInvalidOption)
		}
		c.q = q
		return nil
	}
}

// New returns a node over c, a *redis.Client (plain or from NewFailoverClient)
// or a *redis.ClusterClient, made with ContextTimeoutEnabled: true (otherwise
// go-redis ignores the context's deadline and a stalled server would hold a
// lock attempt for the read timeout). Close does not close c.
//
// With WithQuarantine on a ClusterClient, New connects to every master (bounded
// by the node timeout): a master first seen later is a promoted replica and is
// quarantined.
func New(c redis.UniversalClient, opts ...Option) (*Node, error) {
	cfg := config{timeout: node.DefaultTimeout}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	var ctxTimeouts bool
	var name string
	switch c := c.(type) {
	case *redis.Client:
		o := c.Options()
		ctxTimeouts = o.ContextTimeoutEnabled
		if o.Addr == "FailoverClient" {
			name = fmt.Sprintf("sentinel/%d", o.DB)
		} else {
			name = fmt.Sprintf("%s/%d", o.Addr, o.DB)
		}
	case *redis.ClusterClient:
		o := c.Options()
		ctxTimeouts = o.ContextTimeoutEnabled
		name = "cluster"
		if len(o.Addrs) > 0 {
			name += "/" + o.Addrs[0]
		}
	case nil:
		return nil, fmt.Errorf("%w: nil client", node.ErrInvalidOption)
	default:
		return nil, fmt.Errorf("%w: %T is not a node: use a *redis.Client or a *redis.ClusterClient (a Ring spreads keys over independent servers)", node.ErrInvalidOption, c)
	}
	if !ctxTimeouts {
		return nil, fmt.Errorf("%w: the client must be made with ContextTimeoutEnabled: true, so that calls end by their context's deadline", node.ErrInvalidOption)
	}
	if cfg.name != "" {
		name = cfg.name
	}
	n := &Node{c: c, name: name, timeout: cfg.timeout, q: cfg.q, sub: newSubscriber(c, cfg.timeout)}
	n.Scripted = node.Scripted{Evaler: evaler{n}, Timeout: cfg.timeout}
	if n.q != nil {
		// A quarantined node refuses every script that can grant a lock; a
		// grant that the call's own new connection found on a restarted or
		// promoted server is taken back.
		n.Scripted.Refusal, n.Scripted.Granted = n.q.Refusal, n.q.check
	}
	if cc, ok := c.(*redis.ClusterClient); ok && n.q != nil {
		ctx, cancel := context.WithTimeout(context.Background(), max(4*n.timeout, 2*time.Second))
		_ = cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.Ping(ctx).Err() })
		cancel()
		n.q.g.Settle()
	}
	return n, nil
}

// Name implements node.Node.
func (n *Node) Name() string { return n.name }

// Close implements node.Node: it ends the node's watches, and leaves the client
// open.
func (n *Node) Close() error {
	n.sub.close()
	n.subsMu.Lock()
	n.closed = true
	subs := n.subs
	n.subsMu.Unlock()
	for _, s := range subs {
		s.close()
	}
	return nil
}

// scripts are the node package's scripts as go-redis runs them (EVALSHA,
// then EVAL on NOSCRIPT), by SHA-1.
var scripts = func() map[string]*redis.Script {
	m := map[string]*redis.Script{}
	for _, s := range node.Scripts() {
		m[s.Hash()] = redis.NewScript(s.Source())
	}
	return m
}()

// bound applies the node's timeout to ctx, unless ctx already ends sooner
// (then ctx as it is: the lock client bounds every node call by the node
// timeout already, and a context derived for nothing costs an allocation and
// a registration with its parent on every call).
func (n *Node) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= n.timeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, n.timeout)
}

// evaler runs the node package's script calls over the go-redis client.
type evaler struct{ n *Node }

// Eval implements node.Evaler, bounded by ctx and the node's timeout.
func (e evaler) Eval(ctx context.Context, c node.Call) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if c.Script.Grants() && e.n.q != nil {
		// Scripted asked already; this also covers a caller of the
		// exported Evaler, or one that cleared Scripted.Refusal.
		if err := e.n.q.Refusal(); err != nil {
			return nil, err
		}
	}
	s := scripts[c.Script.Hash()]
	if s == nil {
		return nil, fmt.Errorf("%w: unknown script %s", node.ErrInvalidOption, c.Script.Name())
	}
	ctx, cancel := e.n.bound(ctx)
	defer cancel()
	v, err := s.Run(ctx, e.n.c, c.Keys, c.Args...).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		err = fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	return v, err
}

// Ping checks that the server answers, within ctx and the node's timeout: the
// lock client's breaker probes a node that keeps failing with it.
func (n *Node) Ping(ctx context.Context) error {
	ctx, cancel := n.bound(ctx)
	defer cancel()
	return n.c.Ping(ctx).Err()
}

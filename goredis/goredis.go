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
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/node"
)

// Node is a node.Node over a go-redis client. It is safe for concurrent use.
type Node struct {
	c       redis.UniversalClient
	name    string
	timeout time.Duration
	q       *Quarantine

	sub *subscriber
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
	return nil
}

var (
	acquireScript    = redis.NewScript(node.AcquireScript.Source())
	releaseScript    = redis.NewScript(node.ReleaseScript.Source())
	extendScript     = redis.NewScript(node.ExtendScript.Source())
	writeFenceScript = redis.NewScript(node.WriteFenceScript.Source())
	raiseFenceScript = redis.NewScript(node.RaiseFenceScript.Source())
)

// bound applies the node's timeout to ctx, unless ctx already ends sooner.
func (n *Node) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= n.timeout {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, n.timeout)
}

// run runs s (EVALSHA, then EVAL on NOSCRIPT), bounded by ctx and the timeout.
func (n *Node) run(ctx context.Context, s *redis.Script, keys []string, args ...any) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ctx, cancel := n.bound(ctx)
	defer cancel()
	v, err := s.Run(ctx, n.c, keys, args...).Result()
	if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		err = fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	return v, err
}

func (n *Node) flag(ctx context.Context, s *redis.Script, keys []string, args ...any) (bool, error) {
	v, err := n.run(ctx, s, keys, args...)
	if err != nil {
		return false, err
	}
	i, ok := v.(int64)
	if !ok {
		return false, fmt.Errorf("%w: %v", node.ErrUnexpectedReply, v)
	}
	return i == 1, nil
}

// Acquire implements node.Node. While the node is quarantined it returns a
// *node.QuarantineError without sending anything; when the call itself found
// the node restarted or failed over (a new connection, see Quarantine), a lock
// it took is deleted again and the quarantine is returned.
func (n *Node) Acquire(ctx context.Context, key, fenceKey, token string, ttl time.Duration) (node.Acquired, error) {
	if n.q != nil {
		if err := n.q.Refusal(); err != nil {
			return node.Acquired{}, err
		}
	}
	v, err := n.run(ctx, acquireScript, []string{key, fenceKey}, token, ttl.Milliseconds())
	if err != nil {
		return node.Acquired{}, err
	}
	vals, ok := v.([]any)
	if !ok || len(vals) != 3 {
		return node.Acquired{}, fmt.Errorf("%w: acquire: %v", node.ErrUnexpectedReply, v)
	}
	granted, ok1 := vals[0].(int64)
	fence, ok2 := vals[1].(string)
	present, ok3 := vals[2].(int64)
	if !ok1 || !ok2 || !ok3 {
		return node.Acquired{}, fmt.Errorf("%w: acquire: %v", node.ErrUnexpectedReply, v)
	}
	a, err := node.ParseAcquired(granted, fence, present)
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
	return n.flag(ctx, extendScript, []string{key}, token, ttl.Milliseconds())
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

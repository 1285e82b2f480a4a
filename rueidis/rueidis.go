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
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	rd "github.com/redis/rueidis"

	"github.com/redlock-go/redlock/node"
)

// Node is a node.Node over a rueidis client, with every operation of the
// core's nodes (node.Scripted: the same scripts, the waiters'
// queue) and Watch and Ping. It is safe for concurrent use.
type Node struct {
	node.Scripted
	c       rd.Client
	name    string
	timeout time.Duration
	q       *Quarantine

	mu     sync.Mutex
	keys   map[string]*keySub // watched keys, and lingering ones (watch.go)
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
	n := &Node{c: c, name: name, timeout: cfg.timeout, q: cfg.q, keys: map[string]*keySub{}}
	n.Scripted = node.Scripted{Evaler: evaler{n}, Timeout: cfg.timeout}
	if n.q != nil {
		// A quarantined node refuses every script that can grant a lock; a
		// grant that the call's own new connection found on a restarted or
		// promoted server is taken back.
		n.Scripted.Refusal, n.Scripted.Granted = n.q.Refusal, n.q.check
	}
	return n, nil
}

// Name implements node.Node.
func (n *Node) Name() string { return n.name }

// Close implements node.Node: it ends the node's watches (unsubscribing their
// keys, within the node's timeout), and leaves the client open.
func (n *Node) Close() error {
	n.mu.Lock()
	n.closed = true
	var gone []chan struct{}
	for _, ks := range n.keys {
		ks.retire()
		gone = append(gone, ks.gone)
	}
	n.mu.Unlock()
	for _, g := range gone {
		<-g
	}
	return nil
}

// scripts are the node package's scripts as rueidis runs them (EVALSHA, then
// EVAL on NOSCRIPT), by SHA-1.
var scripts = func() map[string]*rd.Lua {
	m := map[string]*rd.Lua{}
	for _, s := range node.Scripts() {
		m[s.Hash()] = rd.NewLuaScript(s.Source())
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

// evaler runs the node package's script calls over the rueidis client.
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
	args := make([]string, len(c.Args))
	for i, a := range c.Args {
		switch a := a.(type) {
		case string:
			args[i] = a
		case int64:
			args[i] = strconv.FormatInt(a, 10)
		default:
			return nil, fmt.Errorf("%w: argument %T of %s", node.ErrInvalidOption, a, c.Script.Name())
		}
	}
	ctx, cancel := e.n.bound(ctx)
	defer cancel()
	r := s.Exec(ctx, e.n.c, c.Keys, args)
	if err := r.Error(); err != nil {
		if rd.IsRedisNil(err) {
			return nil, nil
		}
		return nil, err
	}
	return r.ToAny()
}

// Ping checks that the server answers, within ctx and the node's timeout: the
// lock client's breaker probes a node that keeps failing with it.
func (n *Node) Ping(ctx context.Context) error {
	ctx, cancel := n.bound(ctx)
	defer cancel()
	return n.c.Do(ctx, n.c.B().Ping().Build()).Error()
}

package goredis

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/node"
)

// Quarantine is the restart and failover detector of one go-redis client, the
// counterpart of node.WithRestartQuarantine: it reads INFO on every new
// connection and makes the node refuse acquisitions (node.ErrQuarantined) for
// its duration after the server behind the client changed. Set its OnConnect as
// the client's OnConnect hook, and pass it to New with WithQuarantine:
//
//	q, err := goredis.NewQuarantine(11 * time.Second) // at least the longest TTL
//	rdb := redis.NewFailoverClient(&redis.FailoverOptions{
//		MasterName: "locks", SentinelAddrs: sentinels,
//		ContextTimeoutEnabled: true, OnConnect: q.OnConnect,
//	})
//	n, err := goredis.New(rdb, goredis.WithQuarantine(q))
//
// The rules, for the primary of each new connection:
//   - another run_id than the primary's of the previous connection (a restart,
//     or a Sentinel failover to another process, whatever its uptime): the full
//     duration (a *node.QuarantineError, from node.RestartGuard);
//   - up less than the duration: what is left of it (node.RestartGuard);
//   - the same run_id with another replication id (master_replid: a former
//     primary back in charge after being a replica): the full duration (a
//     *FailoverError);
//   - the first primary seen that was once a replica (second_repl_offset is not
//     -1: a failover promoted it, when is unknown): the full duration (a
//     *FailoverError);
//   - in a Cluster, each master is told apart by CLUSTER MYID, and a master
//     first seen after New is a promoted replica: the full duration (a
//     *FailoverError); one quarantined master quarantines the whole node.
//
// Connections to replicas are refused with ErrReplica: one kept in the pool
// would run the acquire script unchecked once its server is promoted. Sentinel
// connections of a FailoverClient are let through.
//
// Only new connections are checked: a restart closes the connections to the
// old process, and go-redis' FailoverClient drops its connections to the old
// primary when Sentinel announces the switch. A Cluster master demoted to
// replica and promoted again while the client's connections to it stayed open
// is not seen.
//
// One Quarantine serves one client (one node).
type Quarantine struct {
	g *node.FailoverGuard // the rules
}

// ErrReplica is the error (reachable with errors.Is) of OnConnect on a
// connection to a replica (node.ErrReplica): the quarantine refuses them, since
// a connection opened to a replica and kept in the client's pool would run the
// acquire script unchecked after the replica's promotion. A client with a
// quarantine must not read from replicas (go-redis options ReadOnly,
// RouteByLatency, RouteRandomly, ReplicaOnly): give locks a client of their own.
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

// OnConnect is a go-redis OnConnect hook: it runs INFO server, INFO replication
// and CLUSTER MYID (in one round trip) on a new connection and updates the
// quarantine. It fails the connection when INFO fails. To run a hook of your
// own too, call this one from it.
func (q *Quarantine) OnConnect(ctx context.Context, cn *redis.Conn) error {
	var server, repl *redis.StringCmd
	var myid *redis.StringCmd
	_, _ = cn.Pipelined(ctx, func(p redis.Pipeliner) error {
		server = p.Info(ctx, "server")
		repl = p.Info(ctx, "replication")
		myid = p.ClusterMyID(ctx) // fails outside a Cluster
		return nil
	})
	if err := errors.Join(server.Err(), repl.Err()); err != nil {
		return fmt.Errorf("goredis: restart check: INFO: %w", err)
	}
	id := ""
	if myid.Err() == nil {
		id = myid.Val()
	}
	return q.g.Observe(id, server.Val(), repl.Val(), time.Now())
}

// Quarantine returns the configured duration.
func (q *Quarantine) Quarantine() time.Duration { return q.g.Quarantine() }

// Refusal returns the current quarantine (a *node.QuarantineError, possibly
// inside a *FailoverError; the one that lasts longest), or nil when the node
// may take part in acquisitions.
func (q *Quarantine) Refusal() error { return q.g.Refusal() }

// check is Refusal after a successful call, which needed a connection: if no
// connection was ever observed, OnConnect is not the client's hook.
func (q *Quarantine) check() error {
	if !q.g.Observed() {
		return fmt.Errorf("%w: goredis: the quarantine never saw a connection: set its OnConnect as the client's OnConnect hook", node.ErrInvalidOption)
	}
	return q.Refusal()
}

package goredis

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
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
	d time.Duration

	mu        sync.Mutex
	primaries map[string]*primary // by CLUSTER MYID; "" outside a Cluster
	settled   bool                // a Cluster master first seen now is a new primary
	observed  bool
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
	return q.observe(id, server.Val(), repl.Val(), time.Now())
}

// Quarantine returns the configured duration.
func (q *Quarantine) Quarantine() time.Duration { return q.d }

func infoFields(text string, names ...string) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
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

// ErrReplica is the error (reachable with errors.Is) of OnConnect on a
// connection to a replica: the quarantine refuses them, since a connection
// opened to a replica and kept in the client's pool would run the acquire
// script unchecked after the replica's promotion. A client with a quarantine
// must not read from replicas (go-redis options ReadOnly, RouteByLatency,
// RouteRandomly, ReplicaOnly): give locks a client of their own.
var ErrReplica = errors.New("goredis: connection refused")

// FailoverError is the refusal of a node whose primary changed in a way its
// run_id does not show (a promoted replica, a former primary back in charge):
// a *node.QuarantineError (reachable with errors.As, and errors.Is
// node.ErrQuarantined) with the reason.
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

// primary is what a Quarantine knows of one primary (one per Cluster master).
type primary struct {
	guard  *node.RestartGuard // run_id and uptime: restarts, another process
	runID  string             // run_id last seen
	replid string             // master_replid last seen
	forced *FailoverError     // the latest failover seen through the replication id
}

// observe records one connection to the server with cluster id id (or ""),
// whose INFO server and INFO replication read server and repl at now.
func (q *Quarantine) observe(id, server, repl string, now time.Time) error {
	f := infoFields(server+"\n"+repl, "run_id", "uptime_in_seconds", "role", "master_replid", "second_repl_offset", "redis_mode")
	if f["redis_mode"] == "sentinel" {
		return nil // a FailoverClient's hook runs on its sentinel connections too
	}
	if f["run_id"] == "" || f["uptime_in_seconds"] == "" || f["role"] == "" {
		return fmt.Errorf("%w: restart check: INFO lacks run_id, uptime_in_seconds or role", node.ErrUnexpectedReply)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.observed = true
	if f["role"] != "master" {
		// A connection opened now could serve the acquire script unchecked
		// once this replica is promoted.
		return fmt.Errorf("%w: a replica (role %s): with the quarantine, the client may only connect to primaries", ErrReplica, f["role"])
	}
	p := q.primaries[id]
	reason := ""
	if p == nil {
		g, _ := node.NewRestartGuard(q.d) // d was checked by NewQuarantine
		p = &primary{guard: g}
		q.primaries[id] = p
		switch {
		case q.settled && id != "":
			reason = "a master not seen when the node was made took over slots (a promoted replica)"
		case f["second_repl_offset"] != "" && f["second_repl_offset"] != "-1":
			reason = "the primary was once a replica (a failover promoted it, when is unknown)"
		}
	} else if f["run_id"] == p.runID && f["master_replid"] != p.replid {
		// (A new run_id is the guard's: a restart, or another process.)
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

func (q *Quarantine) settle() {
	q.mu.Lock()
	q.settled = true
	q.mu.Unlock()
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
		if e := p.forced; e != nil && now.Before(e.Until) && !e.Until.Before(until) { // its reason is the more precise
			worst, until = e, e.Until
		}
	}
	return worst
}

// check is Refusal after a successful call, which needed a connection: if no
// connection was ever observed, OnConnect is not the client's hook.
func (q *Quarantine) check() error {
	q.mu.Lock()
	observed := q.observed
	q.mu.Unlock()
	if !observed {
		return fmt.Errorf("%w: goredis: the quarantine never saw a connection: set its OnConnect as the client's OnConnect hook", node.ErrInvalidOption)
	}
	return q.Refusal()
}

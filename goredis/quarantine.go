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
//	q, err := goredis.NewQuarantine(10 * time.Second) // at least the longest TTL
//	rdb := redis.NewFailoverClient(&redis.FailoverOptions{
//		MasterName: "locks", SentinelAddrs: sentinels,
//		ContextTimeoutEnabled: true, OnConnect: q.OnConnect,
//	})
//	n, err := goredis.New(rdb, goredis.WithQuarantine(q))
//
// A primary counts as changed when its run_id or its replication id
// (master_replid) differs from the primary's of the previous connection: a
// restart (new run_id), a Sentinel failover (another process, whatever its
// uptime; a promoted replica also takes a new replication id), or a failback to
// a former primary (new replication id). A primary that has been up less than
// the duration is quarantined for what is left of it (the restart rule of
// node.RestartGuard). The first primary seen that was once a replica
// (second_repl_offset is not -1: a failover made it primary, when is unknown)
// is quarantined for the full duration: a client started just after a failover
// cannot tell it from one long ago. Connections to replicas are not counted (they grant
// nothing). In a Cluster the rule applies to each master (by CLUSTER MYID), a
// master first seen after New counts as changed (a promoted replica), and any
// quarantined master quarantines the whole node.
//
// Only new connections are checked: a process change closes the connections to
// the old process, and go-redis' FailoverClient drops its connections to the old
// primary when Sentinel switches. A Cluster failback to a master whose
// connections stayed open while it was a replica is not seen.
//
// One Quarantine serves one client (one node).
type Quarantine struct {
	d time.Duration

	mu       sync.Mutex
	guards   map[string]*node.RestartGuard // by CLUSTER MYID; "" outside a Cluster
	settled  bool                          // a Cluster master first seen now is a new primary
	observed bool
}

// NewQuarantine returns a detector with quarantine d, in (0,
// node.MaxRestartQuarantine]; d should be at least the longest TTL any client
// uses on the node.
func NewQuarantine(d time.Duration) (*Quarantine, error) {
	if _, err := node.NewRestartGuard(d); err != nil {
		return nil, err
	}
	return &Quarantine{d: d, guards: map[string]*node.RestartGuard{}}, nil
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
		return nil // a replica grants nothing
	}
	// The process and its replication history: either changing is a new primary.
	ident := fmt.Sprintf("run_id:%s.%s\r\nuptime_in_seconds:%s\r\n", f["run_id"], f["master_replid"], f["uptime_in_seconds"])
	g := q.guards[id]
	if g == nil {
		g, _ = node.NewRestartGuard(q.d)
		switch {
		case q.settled && id != "":
			// A Cluster master not seen when the node was made: a promoted replica.
			_ = g.Observe("run_id:(not seen before)\r\nuptime_in_seconds:0\r\n", now)
		case f["second_repl_offset"] != "" && f["second_repl_offset"] != "-1":
			// A promoted replica, seen for the first time: when it was promoted is
			// unknown, so it may have been a moment ago.
			_ = g.Observe("run_id:(promoted replica)\r\nuptime_in_seconds:0\r\n", now)
		}
		q.guards[id] = g
	}
	return g.Observe(ident, now)
}

func (q *Quarantine) settle() {
	q.mu.Lock()
	q.settled = true
	q.mu.Unlock()
}

// Refusal returns the current quarantine (a *node.QuarantineError, the one
// that lasts longest), or nil when the node may take part in acquisitions.
func (q *Quarantine) Refusal() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	var worst *node.QuarantineError
	for _, g := range q.guards {
		var qe *node.QuarantineError
		if errors.As(g.Refusal(), &qe) && (worst == nil || qe.Until.After(worst.Until)) {
			worst = qe
		}
	}
	if worst == nil {
		return nil
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

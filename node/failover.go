package node

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// ErrReplica is the error (reachable with errors.Is) of a connection a
// FailoverGuard refuses because its server is a replica: a connection kept to a
// replica would run the acquire script unchecked after the replica's promotion.
// A client with a failover guard must not send commands to replicas.
var ErrReplica = errors.New("node: connection to a replica refused")

// FailoverError is the refusal of a node whose primary changed in a way its
// run_id does not show (a promoted replica, a former primary back in charge): a
// *QuarantineError (reachable with errors.As, and errors.Is ErrQuarantined)
// with the reason.
type FailoverError struct {
	// Reason says what was seen.
	Reason string
	*QuarantineError
}

func (e *FailoverError) Error() string {
	return fmt.Sprintf("%v: %s; it may lack lock keys the previous primary acknowledged, so it grants no lock until %s (in %v)",
		ErrQuarantined, e.Reason, e.Until.Format("15:04:05.000"), time.Until(e.Until).Round(time.Millisecond))
}

// Unwrap returns the *QuarantineError.
func (e *FailoverError) Unwrap() error { return e.QuarantineError }

// FailoverGuard is the restart and failover detector for a node whose client
// manages its own connections, possibly to several primaries (Sentinel,
// Cluster): the node adapters of the goredis and rueidis modules feed it the
// INFO of every new connection (Observe) and refuse acquisitions while Refusal
// is not nil. The rules, for the primary of each new connection:
//   - another run_id than the primary's of the previous connection (a restart,
//     or a failover to another process, whatever its uptime): the full duration
//     (a *QuarantineError, from RestartGuard);
//   - up less than the duration: what is left of it (RestartGuard);
//   - the same run_id with another replication id (master_replid: a former
//     primary back in charge after being a replica): the full duration (a
//     *FailoverError);
//   - the first primary seen that was once a replica (second_repl_offset is not
//     -1: a failover promoted it, when is unknown): the full duration;
//   - after Settle, a Cluster master not seen before (a promoted replica): the
//     full duration.
//
// Cluster masters are told apart by their CLUSTER MYID; one quarantined master
// quarantines the whole node. Connections to replicas are refused (ErrReplica);
// sentinel connections are let through. One FailoverGuard serves one node.
type FailoverGuard struct {
	d time.Duration

	mu        sync.Mutex
	primaries map[string]*primary // by CLUSTER MYID; "" outside a Cluster
	settled   bool                // a Cluster master first seen now is a new primary
	observed  bool
}

// primary is what a FailoverGuard knows of one primary.
type primary struct {
	guard  *RestartGuard  // run_id and uptime: restarts, another process
	runID  string         // run_id last seen
	replid string         // master_replid last seen
	forced *FailoverError // the latest failover seen through the replication id
}

// NewFailoverGuard returns a detector with quarantine d, in (0,
// MaxRestartQuarantine]; d should be at least the longest TTL any client uses
// on the node.
func NewFailoverGuard(d time.Duration) (*FailoverGuard, error) {
	if _, err := NewRestartGuard(d); err != nil {
		return nil, err
	}
	return &FailoverGuard{d: d, primaries: map[string]*primary{}}, nil
}

// Quarantine returns the configured duration.
func (g *FailoverGuard) Quarantine() time.Duration { return g.d }

// Settle marks the end of the node's start: from now on, a Cluster master not
// seen before is a promoted replica.
func (g *FailoverGuard) Settle() {
	g.mu.Lock()
	g.settled = true
	g.mu.Unlock()
}

// Observed reports whether Observe saw a connection to a primary or replica.
func (g *FailoverGuard) Observed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.observed
}

// Observe records one new connection to the server with Cluster id id ("" outside
// a Cluster), whose INFO server and INFO replication replies are server and repl,
// read at now. It returns an error wrapping ErrReplica for a replica (the
// connection must not be used) and an error wrapping ErrUnexpectedReply when the
// INFO lacks what the rules need.
func (g *FailoverGuard) Observe(id, server, repl string, now time.Time) error {
	f := infoFields(server+"\n"+repl, "run_id", "uptime_in_seconds", "role", "master_replid", "second_repl_offset", "redis_mode")
	if f["redis_mode"] == "sentinel" {
		return nil // a Sentinel client's connections to the sentinels
	}
	if f["run_id"] == "" || f["uptime_in_seconds"] == "" || f["role"] == "" {
		return fmt.Errorf("%w: restart check: INFO lacks run_id, uptime_in_seconds or role", ErrUnexpectedReply)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.observed = true
	if f["role"] != "master" {
		// A connection opened now could serve the acquire script unchecked
		// once this replica is promoted.
		return fmt.Errorf("%w: a replica (role %s): with the quarantine, the client may only connect to primaries", ErrReplica, f["role"])
	}
	p := g.primaries[id]
	reason := ""
	if p == nil {
		rg, _ := NewRestartGuard(g.d) // d was checked by NewFailoverGuard
		p = &primary{guard: rg}
		g.primaries[id] = p
		switch {
		case g.settled && id != "":
			reason = "a master not seen when the node was made took over slots (a promoted replica)"
		case f["second_repl_offset"] != "" && f["second_repl_offset"] != "-1":
			reason = "the primary was once a replica (a failover promoted it, when is unknown)"
		}
	} else if f["run_id"] == p.runID && f["master_replid"] != p.replid {
		// (A new run_id is the restart guard's: a restart, or another process.)
		reason = "the primary's replication id changed (it was a replica, and is primary again)"
	}
	p.runID, p.replid = f["run_id"], f["master_replid"]
	if err := p.guard.Observe(server, now); err != nil {
		return err
	}
	if reason != "" {
		up, _ := time.ParseDuration(f["uptime_in_seconds"] + "s")
		e := &FailoverError{Reason: reason, QuarantineError: &QuarantineError{
			RunID: f["run_id"], Uptime: up, Until: now.Add(g.d), Quarantine: g.d,
		}}
		if p.forced == nil || e.Until.After(p.forced.Until) {
			p.forced = e
		}
	}
	return nil
}

// Refusal returns the current quarantine (a *QuarantineError, possibly inside a
// *FailoverError; the one that lasts longest), or nil when the node may take
// part in acquisitions.
func (g *FailoverGuard) Refusal() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	var worst error
	var until time.Time
	for _, p := range g.primaries {
		var qe *QuarantineError
		if errors.As(p.guard.Refusal(), &qe) && qe.Until.After(until) {
			worst, until = qe, qe.Until
		}
		if e := p.forced; e != nil && now.Before(e.Until) && !e.Until.Before(until) { // its reason is the more precise
			worst, until = e, e.Until
		}
	}
	return worst
}

// infoFields returns the values of the fields names in an INFO reply.
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

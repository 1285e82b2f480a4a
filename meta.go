package redlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redlock-go/redlock/node"
)

// MaxMetadataLen bounds the value of WithMetadata, Campaign and Proclaim, in
// bytes: it is stored on every node beside the lock key.
const MaxMetadataLen = 64 << 10

// ErrNoLeader is returned by Leader when a majority of the nodes answered and
// none of them has a current holder's record: nobody leads (or the holder
// wrote no metadata).
var ErrNoLeader = errors.New("redlock: no leader")

var errNoMajorityAnswered = errors.New("fewer than a majority of the nodes answered")

// WithMetadata stores value with the lock on the nodes, for `redlock status`
// (and Client.Leader) to show who holds it: the acquisition writes it right
// after the grant, to every node that holds the lock (one more round trip),
// and Lock, TryLock or Do return only once a majority stored it; when it
// cannot be stored the lock is released and the error (ErrLockLost or
// ErrUnavailable) returned, as for WithFence. With WithFence the record
// carries the fencing token too. It is renewed with the lock (Extend), and
// read back only while the lock is held by the holder that wrote it. At most
// MaxMetadataLen bytes; a value is never a secret (anyone who can read the
// nodes' keys reads it).
func WithMetadata(value string) LockOption {
	return lockOptionFunc(func(c *lockConfig) error {
		if err := checkMetadata(value); err != nil {
			return err
		}
		c.meta = &value
		return nil
	})
}

func checkMetadata(value string) error {
	if len(value) > MaxMetadataLen {
		return invalid("metadata of %d bytes exceeds %d", len(value), MaxMetadataLen)
	}
	return nil
}

// announce writes the holder's first record (rev 0): its fencing token if it
// has one (a leader's term), when it took the lock, and value.
func (l *Lock) announce(ctx context.Context, value string) error {
	return l.writeMeta(ctx, node.Meta{Term: l.fence, Since: l.since(), Value: value})
}

// since is when the lock was taken, as the nodes store it (ms).
func (l *Lock) since() time.Time { return time.UnixMilli(l.acquiredAt.UnixMilli()) }

// writeMeta stores m beside the lock on every node that holds it (a
// compare-and-set on the token: node.Node.WriteMeta), and succeeds once a
// majority did, before Until. It fails with ErrLockLost when the lock is
// released, its validity is over (nothing is sent), or a majority no longer
// holds it; with ErrUnavailable when too few nodes answered. The caller must
// have begun an operation of the client (c.begin).
func (l *Lock) writeMeta(ctx context.Context, m node.Meta) error {
	c := l.c
	if l.isReleased() {
		return c.failed("metadata", l.resource, ErrLockLost, errReleased)
	}
	until := l.Until()
	start := c.cfg.clock.Now()
	if !start.Before(until) {
		return c.failed("metadata", l.resource, ErrLockLost, errValidityEnded)
	}
	call := round[struct{}]{op: "metadata", call: func(ctx context.Context, _ int, n node.Node) (struct{}, bool, error) {
		ok, err := n.WriteMeta(ctx, l.key, l.token, m, l.ttl)
		return struct{}{}, ok, err
	}}.start(ctx, c)
	// A majority that answers after Until is worthless: wait no longer.
	wctx, cancel := context.WithTimeout(ctx, until.Sub(start))
	defer cancel()
	o := call.settle(wctx, call.Wait(wctx))
	if o.Success {
		return nil
	}
	kind := ErrUnavailable
	if refusedMajority(o, len(c.nodes)) || !c.cfg.clock.Now().Before(until) {
		kind = ErrLockLost
	}
	return call.fail(wctx, l.resource, kind, o, errValidityEnded)
}

// LeaderInfo is a holder's record as the nodes store it: who leads an
// election (Campaign, Proclaim), or the metadata of a plain lock
// (WithMetadata, Term 0 unless fenced).
type LeaderInfo struct {
	// Name is the election's name (the lock's resource).
	Name string
	// Value is the leader's value (Campaign, then Proclaim).
	Value string
	// Term is the leader's term: the fencing token of its lock, larger for
	// every later leader.
	Term uint64
	// Rev orders the values of one term: 0 at Campaign, one more per
	// Proclaim.
	Rev uint64
	// Since is when the leader took the lock (the leader's clock, ms).
	Since time.Time
}

// Vacant reports whether the record says nobody leads: Observe sends one
// (Name only) when the leader is gone and no other leads yet.
func (li LeaderInfo) Vacant() bool { return li.Since.IsZero() }

// newer reports whether li is a later record than old: a larger term, or
// the same term and a larger revision.
func (li LeaderInfo) newer(old LeaderInfo) bool {
	return li.Term > old.Term || li.Term == old.Term && li.Rev > old.Rev
}

// Leader reads the record of the leader of election name (or the holder of
// lock name, with WithMetadata) from every node, and returns, once a
// majority answered, the one with the highest term (then revision) among
// the answers. A record is read from a node only while the lock key there
// holds the token of the holder that wrote it. Every leader writes its
// record to a majority before Campaign returns, and any two majorities share
// a node: Leader sees the current leader, or one elected after it started;
// it may also see a leader whose release (Resign, Release) returned at a
// majority and has yet to land on the node read, unless that release was
// this client's: a read of node i waits for this client's own release of
// name there to answer (bounded by the node timeout), so that a client does
// not read itself as the holder after its release returned; on a node whose
// acquisition was still in flight at Release, the read waits for that
// acquisition to answer and, if it took the lock there, for its undo.
// It fails with ErrNoLeader when none of the answers has a record, and with
// a *QuorumError (ErrUnavailable) when fewer than a majority answered.
func (c *Client) Leader(ctx context.Context, name string) (LeaderInfo, error) {
	if err := checkContext(ctx); err != nil {
		return LeaderInfo{}, err
	}
	if _, err := c.lockConfig(name, nil); err != nil {
		return LeaderInfo{}, err
	}
	if err := c.begin(); err != nil {
		return LeaderInfo{}, err
	}
	defer c.end()
	key := c.lockKey(name)
	type record struct {
		m     node.Meta
		found bool
	}
	call := round[record]{op: "leader", call: func(ctx context.Context, i int, n node.Node) (record, bool, error) {
		c.awaitOwnRelease(ctx, name, i, nil) // our own release still landing there would show us as the holder
		m, found, err := n.ReadMeta(ctx, key)
		return record{m, found}, err == nil, err // every answer counts
	}}.start(ctx, c)
	o := call.Wait(ctx)
	if !o.Success {
		return LeaderInfo{}, call.fail(ctx, name, ErrUnavailable, o, errNoMajorityAnswered)
	}
	var best LeaderInfo
	for _, r := range call.Replies() {
		if !r.Done || r.Err != nil || !r.Value.found {
			continue
		}
		m := r.Value.m
		li := LeaderInfo{Name: name, Value: m.Value, Term: m.Term, Rev: m.Rev, Since: m.Since}
		if best.Vacant() || li.newer(best) {
			best = li
		}
	}
	if best.Vacant() {
		return LeaderInfo{Name: name}, fmt.Errorf("%w: %q (%d of %d nodes answered)", ErrNoLeader, name, o.Yes, len(c.nodes))
	}
	return best, nil
}

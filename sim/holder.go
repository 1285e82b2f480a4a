package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redlock-go/redlock"
)

// Holder is a client that uses the lock the documented way (TryLock, Fence,
// Extend, check time.Now().Before(lock.Until()) right before acting, Release)
// and records every step, and every protected write, in the world's history.
// The random runner and the scripted scenarios share it.
type Holder struct {
	w       *World
	c       int
	Name    string
	Client  *redlock.Client
	grants  int
	attempt int
	silent  bool // its grants are not reported to the fault driver or prober
}

// NewHolder creates a redlock.Client for client c (see World.NewClient) and
// wraps it.
func (w *World) NewHolder(c int, opts ...redlock.Option) (*Holder, error) {
	cl, err := w.NewClient(c, opts...)
	if err != nil {
		return nil, err
	}
	return &Holder{w: w, c: c, Name: w.names[c], Client: cl}, nil
}

// TryLock makes one acquisition attempt; with eager, the fencing token is
// obtained before TryLock returns (redlock.WithFence). It returns the grant on
// success.
func (h *Holder) TryLock(eager bool) (*Grant, error) {
	w := h.w
	h.attempt++
	var opts []redlock.LockOption
	if eager {
		opts = append(opts, redlock.WithFence())
	}
	started := w.since()
	w.record(h.Name, fmt.Sprintf("TryLock (attempt %d, eager fence %v)", h.attempt, eager))
	l, err := h.Client.TryLock(context.Background(), Resource, opts...)
	if err != nil {
		w.record(h.Name, "TryLock failed: "+errStr(err))
		return nil, err
	}
	h.grants++
	g := &Grant{
		ID: fmt.Sprintf("%s%d", h.Name, h.grants), Client: h.c,
		Started: started, Acquired: w.since(), Until: l.Until().Sub(w.start),
		Released: -1, FencedAt: -1, token: l.Token(), lock: l,
	}
	if eager {
		tok, err := l.Fence(context.Background()) // cached: no round trip
		if err != nil {
			return nil, fmt.Errorf("eager lock without a token: %w", err)
		}
		g.Fence, g.FencedAt = tok, g.Acquired
	}
	w.hist.addGrant(g)
	w.record(h.Name, fmt.Sprintf("GRANT %s (lock token %s): acquired, valid until %s, fencing token %s",
		g.ID, w.TokenAlias(g.token), fmtDur(g.Until), fenceStr(g.Fence)))
	if w.onGrant != nil && !h.silent {
		w.onGrant(grantEvent{id: g.ID, token: g.token, acquired: g.Acquired, until: g.Until})
	}
	return g, nil
}

// Fence obtains the grant's fencing token (lazily, if TryLock was not eager).
func (h *Holder) Fence(g *Grant) error {
	if g.Fence != 0 {
		return nil
	}
	tok, err := g.lock.Fence(context.Background())
	if err != nil {
		h.w.record(h.Name, fmt.Sprintf("%s fence failed: %v", g.ID, errStr(err)))
		return err
	}
	g.Fence, g.FencedAt = tok, h.w.since()
	h.w.record(h.Name, fmt.Sprintf("%s fenced: token %d", g.ID, tok))
	return nil
}

// Extend renews the grant's lease.
func (h *Holder) Extend(g *Grant) error {
	err := g.lock.Extend(context.Background())
	h.w.setUntil(g)
	if err != nil {
		h.w.record(h.Name, fmt.Sprintf("%s extend failed: %v (valid until %s)", g.ID, errStr(err), fmtDur(g.Until)))
	} else {
		h.w.record(h.Name, fmt.Sprintf("%s extended: valid until %s", g.ID, fmtDur(g.Until)))
	}
	return err
}

// Check is the documented check before acting: time.Now().Before(Until). It
// returns the validity left.
func (h *Holder) Check(g *Grant) (left time.Duration, ok bool) {
	now := time.Now()
	until := g.lock.Until()
	if !now.Before(until) {
		h.w.record(h.Name, fmt.Sprintf("%s checks validity: over (until %s): does not act", g.ID, fmtDur(until.Sub(h.w.start))))
		return 0, false
	}
	h.w.record(h.Name, fmt.Sprintf("%s checks validity: %v left", g.ID, until.Sub(now)))
	return until.Sub(now), true
}

// Pause stalls the holder (a GC pause, a VM stall) for d.
func (h *Holder) Pause(g *Grant, d time.Duration, why string) {
	h.w.record(h.Name, fmt.Sprintf("%s PAUSES %v (%s)", g.ID, d.Round(time.Microsecond), why))
	time.Sleep(d)
}

// Write performs the protected write now, with the grant's fencing token:
// on the plain register (which takes every write) and on the fenced value
// (which refuses a token lower than one it accepted). checked is when the
// holder last checked its validity.
func (h *Holder) Write(g *Grant, checked time.Duration) *Write {
	w := h.w
	err := w.fenced.Store(g.Fence, g.ID)
	wr := &Write{Grant: g, CheckedAt: checked, At: w.since(), Token: g.Fence, Accepted: err == nil}
	w.hist.addWrite(wr)
	verdict := "accepted"
	if err != nil {
		verdict = "REFUSED (" + err.Error() + ")"
	}
	w.record(h.Name, fmt.Sprintf("%s WRITES with token %d: the plain register takes it; the fenced resource: %s", g.ID, g.Fence, verdict))
	return wr
}

// Release releases the grant.
func (h *Holder) Release(g *Grant) error {
	h.w.setUntil(g)
	g.Released = h.w.since()
	err := g.lock.Release(context.Background())
	h.w.record(h.Name, fmt.Sprintf("%s released: %v", g.ID, errStr(err)))
	return err
}

// WalkAway leaves the grant to expire.
func (h *Holder) WalkAway(g *Grant) {
	h.w.setUntil(g)
	h.w.record(h.Name, fmt.Sprintf("%s walks away without releasing", g.ID))
}

// setUntil records the grant's current Until (the lock's Until is zeroed by
// Release, so it is read before).
func (w *World) setUntil(g *Grant) {
	u := g.lock.Until()
	if u.IsZero() {
		return
	}
	w.hist.mu.Lock()
	g.Until = u.Sub(w.start)
	w.hist.mu.Unlock()
}

func fenceStr(t uint64) string {
	if t == 0 {
		return "none yet (lazy)"
	}
	return fmt.Sprint(t)
}

// errStr renders an error for the timeline. A QuorumError is shown without
// its per-node errors: nodes that fail at the same virtual instant (their
// calls share one deadline) are counted in an order the Go scheduler picks;
// the counts are the same, the list is not. The messages show each node's
// fate anyway.
func errStr(err error) string {
	if err == nil {
		return "ok"
	}
	var qe *redlock.QuorumError
	if errors.As(err, &qe) {
		c := *qe
		c.Errs = nil
		return c.Error()
	}
	return err.Error()
}

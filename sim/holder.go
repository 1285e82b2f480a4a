package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/node"
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
	started := w.since()
	w.record(h.Name, fmt.Sprintf("TryLock (attempt %d, eager fence %v)", h.attempt, eager))
	l, err := h.Client.TryLock(context.Background(), Resource, lockOptions(eager)...)
	if err != nil {
		h.failed("TryLock", err)
		return nil, err
	}
	return h.granted(l, started, eager, PathTryLock)
}

// Grant paths (Grant.Path).
const (
	PathTryLock   = "TryLock"
	PathLock      = "Lock"
	PathLockMulti = "LockMulti"
	PathDoMulti   = "DoMulti"
)

func lockOptions(eager bool) []redlock.LockOption {
	if eager {
		return []redlock.LockOption{redlock.WithFence()}
	}
	return nil
}

// Lock waits for the lock (Client.Lock: retried by the library, queued on
// the nodes once refused, woken by releases; in fair mode queued from the
// first attempt) for at most wait.
func (h *Holder) Lock(eager bool, wait time.Duration) (*Grant, error) {
	w := h.w
	h.attempt++
	started := w.since()
	w.record(h.Name, fmt.Sprintf("Lock (call %d, eager fence %v, waits up to %v)", h.attempt, eager, wait.Round(time.Microsecond)))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	l, err := h.Client.Lock(ctx, Resource, lockOptions(eager)...)
	if err != nil {
		h.failed("Lock", err)
		return nil, err
	}
	return h.granted(l, started, eager, PathLock)
}

// LockMulti waits for Resource and others together (Client.LockMulti) for at
// most wait. The grant is Resource's lock; Extend and Release act on them all.
func (h *Holder) LockMulti(eager bool, wait time.Duration, others []string) (*Grant, error) {
	w := h.w
	h.attempt++
	res := append([]string{Resource}, others...)
	started := w.since()
	w.record(h.Name, fmt.Sprintf("LockMulti %v (call %d, eager fence %v, waits up to %v)", res, h.attempt, eager, wait.Round(time.Microsecond)))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	m, err := h.Client.LockMulti(ctx, res, lockOptions(eager)...)
	if err != nil {
		h.failed("LockMulti", err)
		return nil, err
	}
	for _, l := range m.Locks() {
		if l.Resource() == Resource {
			g, err := h.granted(l, started, eager, PathLockMulti)
			if g != nil {
				g.multi = m
			}
			return g, err
		}
	}
	_ = m.Release(context.Background())
	return nil, fmt.Errorf("LockMulti %v returned no lock on %q", res, Resource)
}

// DoMulti runs a DoMulti on Resource and others whose fn holds them for
// work (or until its context ends), renewed by the library, within wait +
// work overall. Its grant is the window in which fn's context was live: from
// the start of fn to the earlier of fn's return and the end of its context.
// fn makes no protected write (Do does not expose the lock's fencing token):
// the grant counts for mutual exclusion only.
func (h *Holder) DoMulti(wait, work time.Duration, others []string) error {
	w := h.w
	h.attempt++
	res := append([]string{Resource}, others...)
	started := w.since()
	w.record(h.Name, fmt.Sprintf("DoMulti %v (call %d, works %v, waits up to %v)", res, h.attempt, work.Round(time.Microsecond), wait.Round(time.Microsecond)))
	ctx, cancel := context.WithTimeout(context.Background(), wait+work)
	defer cancel()
	ran := false
	err := h.Client.DoMulti(ctx, res, func(fctx context.Context) error {
		ran = true
		from := w.since()
		token := w.heldToken()
		h.grants++
		g := &Grant{
			ID: fmt.Sprintf("%s%d", h.Name, h.grants), Client: h.c, Path: PathDoMulti,
			Started: started, Acquired: from, Until: from + w.TTL, Released: -1, FencedAt: -1, token: token,
		}
		w.hist.addGrant(g)
		w.record(h.Name, fmt.Sprintf("GRANT %s (lock token %s) by DoMulti: fn runs while its context lives", g.ID, w.TokenAlias(token)))
		if w.onGrant != nil && !h.silent && token != "" {
			w.onGrant(grantEvent{id: g.ID, token: token, acquired: from, until: from + w.TTL})
		}
		t := time.NewTimer(work)
		defer t.Stop()
		var ferr error
		select {
		case <-t.C:
		case <-fctx.Done():
			ferr = fctx.Err()
		}
		end := w.since()
		w.hist.mu.Lock()
		g.Until, g.Released = end, end
		w.hist.mu.Unlock()
		if ferr != nil {
			w.record(h.Name, fmt.Sprintf("%s: fn's context ended (%v): stops relying on the lock", g.ID, context.Cause(fctx)))
		} else {
			w.record(h.Name, fmt.Sprintf("%s: fn returns", g.ID))
		}
		return ferr
	})
	switch {
	case !ran:
		h.failed("DoMulti", err)
	default:
		w.record(h.Name, "DoMulti returned: "+errStr(err))
	}
	return err
}

// heldToken returns the value most nodes hold under LockKey ("" if none).
func (w *World) heldToken() string {
	count := map[string]int{}
	best := ""
	for _, n := range w.nodes {
		if v, ok := n.Get(LockKey); ok {
			count[v]++
			if count[v] > count[best] || count[v] == count[best] && v < best {
				best = v
			}
		}
	}
	return best
}

// failed records a failed acquisition, noting when a restart guard refused a
// node (errors.Is node.ErrQuarantined).
func (h *Holder) failed(call string, err error) {
	text := call + " failed: " + errStr(err)
	if errors.Is(err, node.ErrQuarantined) {
		h.w.quarantined.Add(1)
		text += " (a restart guard refused a quarantined node)"
	}
	h.w.record(h.Name, text)
}

// granted records a grant of l.
func (h *Holder) granted(l *redlock.Lock, started time.Duration, eager bool, path string) (*Grant, error) {
	w := h.w
	h.grants++
	g := &Grant{
		ID: fmt.Sprintf("%s%d", h.Name, h.grants), Client: h.c, Path: path,
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
	by := ""
	if path != PathTryLock {
		by = " by " + path
	}
	w.record(h.Name, fmt.Sprintf("GRANT %s (lock token %s)%s: acquired, valid until %s, fencing token %s",
		g.ID, w.TokenAlias(g.token), by, fmtDur(g.Until), fenceStr(g.Fence)))
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

// Extend renews the grant's lease (every lock of a LockMulti grant).
func (h *Holder) Extend(g *Grant) error {
	var err error
	if g.multi != nil {
		err = g.multi.Extend(context.Background())
	} else {
		err = g.lock.Extend(context.Background())
	}
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
	var err error
	if g.multi != nil {
		err = g.multi.Release(context.Background())
	} else {
		err = g.lock.Release(context.Background())
	}
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
	if g.lock == nil {
		return
	}
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

package sim

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// The checker works on the recorded history only: grants (as their holders
// saw them) and protected writes (as the resource saw them).
//
// Definitions (all times are the bubble's virtual time, which is also every
// client's clock):
//
//   - A grant's validity window is [Acquired, ValidEnd): from the moment
//     TryLock returned the lock (the earliest the holder can act) to its last
//     Until (as extended), or to the call of Release if earlier. It does not
//     start when TryLock was called: a request sent while another client held
//     the lock, delayed in the network and granted after that lock ended, is
//     not an overlap.
//   - A grant's occupancy is [Acquired, max(ValidEnd, last write)]: the holder
//     occupies the resource while its lease is valid, and until its last
//     protected write took effect if that was later (a holder paused past its
//     validity, P3).
//   - An overlap is a pair of grants whose occupancies intersect (for a
//     positive duration). It is a "lease" overlap when the validity windows
//     themselves intersect (the lock service gave the lock twice: P1, P2, P5,
//     P6, P7, P8), an "action" overlap when only a late write makes them
//     intersect (P3).
//   - Grant B is later than grant A when B's TryLock was called after A's
//     returned: then every correct lock orders A before B, and fencing must
//     give B the larger token (docs/fencing.md, Theorem 1, whatever the clocks
//     or pauses, as long as no counter is lost).
//   - A stale write is a write of A that a resource accepted after it had
//     accepted a write of a later grant B. The plain register (no fencing)
//     accepts every write; the fenced resource (fence.Value) only tokens at
//     least as high as the highest it accepted.

// Overlap is two grants that occupied the resource at the same time.
type Overlap struct {
	A, B     *Grant
	From, To time.Duration
	// Kind is "lease" (validity windows intersect) or "action" (a write
	// after the writer's validity, while the other held the lock).
	Kind string
}

// Report is the checker's verdict on one history.
type Report struct {
	Grants, Writes int
	// Overlaps: mutual exclusion violations.
	Overlaps []Overlap
	// StaleAccepted: writes the fenced resource accepted although a later
	// grant had written before (fencing failed).
	StaleAccepted []*Write
	// UnfencedStale: the same for the plain register: what fencing prevents.
	UnfencedStale []*Write
	// TokenOrder: fencing order violations: two grants with the same token,
	// or a later grant with a token not above an earlier one's.
	TokenOrder []string
	// RefusedValid: writes made inside the writer's validity that the fenced
	// resource refused (possible only if the lock or fencing misordered
	// grants).
	RefusedValid []*Write
	// LateWrites: writes that took effect after their validity ended (the
	// holder broke P3).
	LateWrites []*Write
}

// Violations counts everything that must not happen when every precondition
// holds. Late writes count too: within the bounds, the holder's pause leaves
// its write inside its validity.
func (r Report) Violations() int {
	return len(r.Overlaps) + len(r.StaleAccepted) + len(r.TokenOrder) + len(r.RefusedValid) + len(r.LateWrites)
}

// Summary is a one-line verdict.
func (r Report) Summary() string {
	return fmt.Sprintf("grants=%d writes=%d overlaps=%d stale_accepted=%d unfenced_stale=%d token_order=%d refused_valid=%d late_writes=%d",
		r.Grants, r.Writes, len(r.Overlaps), len(r.StaleAccepted), len(r.UnfencedStale), len(r.TokenOrder), len(r.RefusedValid), len(r.LateWrites))
}

// Details lists every finding, one per line.
func (r Report) Details() string {
	var b strings.Builder
	for _, o := range r.Overlaps {
		fmt.Fprintf(&b, "OVERLAP (%s): %s [%s, %s] and %s [%s, %s] both held the lock during [%s, %s] (%v)\n",
			o.Kind, o.A.ID, fmtDur(o.A.Acquired), fmtDur(occEnd(o.A)), o.B.ID, fmtDur(o.B.Acquired), fmtDur(occEnd(o.B)),
			fmtDur(o.From), fmtDur(o.To), (o.To - o.From).Round(time.Microsecond))
	}
	for _, wr := range r.StaleAccepted {
		fmt.Fprintf(&b, "STALE WRITE ACCEPTED by the fenced resource: %s token %d at %s\n", wr.Grant.ID, wr.Token, fmtDur(wr.At))
	}
	for _, wr := range r.UnfencedStale {
		fmt.Fprintf(&b, "stale write that a resource without fencing would take: %s at %s (a later grant had written)\n", wr.Grant.ID, fmtDur(wr.At))
	}
	for _, s := range r.TokenOrder {
		fmt.Fprintf(&b, "TOKEN ORDER: %s\n", s)
	}
	for _, wr := range r.RefusedValid {
		fmt.Fprintf(&b, "REFUSED VALID WRITE: %s token %d at %s, valid until %s\n", wr.Grant.ID, wr.Token, fmtDur(wr.At), fmtDur(wr.Grant.ValidEnd()))
	}
	for _, wr := range r.LateWrites {
		fmt.Fprintf(&b, "LATE WRITE: %s wrote at %s, validity ended %s\n", wr.Grant.ID, fmtDur(wr.At), fmtDur(wr.Grant.ValidEnd()))
	}
	return b.String()
}

// lastWrite returns the time of g's last write, or -1.
func lastWrite(g *Grant, writes []*Write) time.Duration {
	last := time.Duration(-1)
	for _, wr := range writes {
		if wr.Grant == g && wr.At > last {
			last = wr.At
		}
	}
	return last
}

func occEnd(g *Grant) time.Duration {
	end := g.ValidEnd()
	if g.lastWrite > end {
		end = g.lastWrite
	}
	return end
}

// late reports whether a write took effect after its validity: at or after
// Until, or after Release was called (a write and the Release that follows it
// may share a virtual instant).
func late(wr *Write) bool {
	g := wr.Grant
	return wr.At >= g.Until || g.Released >= 0 && wr.At > g.Released
}

// later reports whether b is later than a: b's TryLock was called after a's
// returned.
func later(b, a *Grant) bool { return b.Started > a.Acquired }

// Check applies the definitions above to a history.
func Check(h *History) Report {
	grants, writes := h.Grants(), h.Writes()
	sort.SliceStable(writes, func(i, j int) bool { return writes[i].At < writes[j].At })
	r := Report{Grants: len(grants), Writes: len(writes)}
	for _, g := range grants {
		g.lastWrite = lastWrite(g, writes)
	}

	// Mutual exclusion.
	for i, a := range grants {
		for _, b := range grants[i+1:] {
			from := max(a.Acquired, b.Acquired)
			to := min(occEnd(a), occEnd(b))
			if from >= to {
				continue
			}
			kind := "action"
			if max(a.Acquired, b.Acquired) < min(a.ValidEnd(), b.ValidEnd()) {
				kind = "lease"
			}
			x, y := a, b
			if y.Acquired < x.Acquired {
				x, y = y, x
			}
			r.Overlaps = append(r.Overlaps, Overlap{A: x, B: y, From: from, To: to, Kind: kind})
		}
	}

	// Stale writes: accepted after a write of a later grant.
	for i, wr := range writes {
		for _, prev := range writes[:i] {
			if prev.Grant == wr.Grant || !later(prev.Grant, wr.Grant) {
				continue
			}
			r.UnfencedStale = append(r.UnfencedStale, wr)
			break
		}
		if !wr.Accepted {
			continue
		}
		for _, prev := range writes[:i] {
			if prev.Accepted && prev.Grant != wr.Grant && later(prev.Grant, wr.Grant) {
				r.StaleAccepted = append(r.StaleAccepted, wr)
				break
			}
		}
	}

	// Token order.
	for i, a := range grants {
		if a.Fence == 0 {
			continue
		}
		for _, b := range grants[i+1:] {
			if b.Fence == 0 {
				continue
			}
			switch {
			case a.Fence == b.Fence:
				r.TokenOrder = append(r.TokenOrder, fmt.Sprintf("%s and %s both have token %d", a.ID, b.ID, a.Fence))
			case later(b, a) && b.Fence < a.Fence:
				r.TokenOrder = append(r.TokenOrder, fmt.Sprintf("%s (token %d) is later than %s (token %d)", b.ID, b.Fence, a.ID, a.Fence))
			case later(a, b) && a.Fence < b.Fence:
				r.TokenOrder = append(r.TokenOrder, fmt.Sprintf("%s (token %d) is later than %s (token %d)", a.ID, a.Fence, b.ID, b.Fence))
			}
		}
	}

	// Writes inside validity must be accepted; writes outside are late.
	for _, wr := range writes {
		if late(wr) {
			r.LateWrites = append(r.LateWrites, wr)
		} else if !wr.Accepted {
			r.RefusedValid = append(r.RefusedValid, wr)
		}
	}
	return r
}

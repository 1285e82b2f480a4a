package sim

import (
	"fmt"
	"strings"
	"time"

	"github.com/redlock-go/redlock/internal/history"
)

// The checker works on the recorded history only: grants (as their holders
// saw them) and protected writes (as the resource saw them), judged by the
// definitions of internal/history, which the fault-injection suite shares.
// All times are the bubble's virtual time, which is also every client's
// clock. The plain register (no fencing) accepts every write; the fenced
// resource (fence.Value) only tokens at least as high as the highest it
// accepted.

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

func occEnd(g *Grant) time.Duration {
	end := g.ValidEnd()
	if g.lastWrite > end {
		end = g.lastWrite
	}
	return end
}

// Check judges a history by the definitions of internal/history.
func Check(h *History) Report {
	grants, writes := h.Grants(), h.Writes()
	in := make([]*history.Grant, len(grants))
	index := make(map[*Grant]int, len(grants))
	at := func(d time.Duration) time.Time { return h.start.Add(d) }
	for i, g := range grants {
		index[g] = i
		g.lastWrite = -1
		in[i] = &history.Grant{Client: g.Client, Started: at(g.Started), Acquired: at(g.Acquired), Until: at(g.Until), Token: g.Fence}
		if g.Released >= 0 {
			in[i].Released = at(g.Released)
		}
	}
	mine := make([][]*Write, len(grants)) // mine[i][j] is in[i].Writes[j]
	for seq, wr := range writes {
		i := index[wr.Grant]
		in[i].Writes = append(in[i].Writes, history.Write{At: at(wr.At), Seq: seq, Accepted: wr.Accepted})
		mine[i] = append(mine[i], wr)
		wr.Grant.lastWrite = max(wr.Grant.lastWrite, wr.At)
	}
	v := history.Check(in)
	refs := func(rs []history.WriteRef) []*Write {
		var out []*Write
		for _, r := range rs {
			out = append(out, mine[r.Grant][r.Write])
		}
		return out
	}
	r := Report{Grants: v.Grants, Writes: v.Writes, StaleAccepted: refs(v.StaleAccepted), UnfencedStale: refs(v.UnfencedStale),
		RefusedValid: refs(v.RefusedValid), LateWrites: refs(v.LateWrites)}
	for _, o := range v.Overlaps {
		kind := "action"
		if o.Lease {
			kind = "lease"
		}
		r.Overlaps = append(r.Overlaps, Overlap{A: grants[o.A], B: grants[o.B], From: o.From.Sub(h.start), To: o.To.Sub(h.start), Kind: kind})
	}
	for _, t := range v.TokenOrder {
		a, b := grants[t.A], grants[t.B]
		if t.Equal {
			r.TokenOrder = append(r.TokenOrder, fmt.Sprintf("%s and %s both have token %d", a.ID, b.ID, a.Fence))
		} else {
			r.TokenOrder = append(r.TokenOrder, fmt.Sprintf("%s (token %d) is later than %s (token %d)", b.ID, b.Fence, a.ID, a.Fence))
		}
	}
	return r
}

// Package history checks a recorded history of lock grants and the writes
// their holders made to a protected resource: mutual exclusion, fencing-token
// order, and stale writes. The simulation (sim/) and the fault-injection suite
// (faults/) record histories in their own terms and both judge them here, so
// that "overlap" and "stale write" mean the same thing in both.
//
// Definitions (times are one clock shared by every holder: the bubble's
// virtual clock in sim/, the test process' monotonic clock in faults/):
//
//   - A grant's validity window is [Acquired, End): from the moment the lock
//     call returned (the earliest the holder can act) to its last Until (as
//     extended), or to the call of Release if earlier. It does not start when
//     the lock call was made: a request sent while another client held the
//     lock, delayed and granted after that lock ended, is not an overlap.
//   - A grant's occupancy is [Acquired, max(End, last write)]: a holder paused
//     past its validity still occupies the resource until its last write took
//     effect.
//   - An overlap is two grants of one resource to different clients whose
//     occupancies intersect for a positive duration. It is a lease overlap
//     when the validity windows themselves intersect (the lock was given
//     twice), an action overlap when only a late write makes them intersect.
//   - Grant B is later than grant A when B's lock call started after A's
//     returned: every correct lock orders A before B, and fencing must give B
//     the larger token (docs/fencing.md, Theorem 1).
//   - A stale write is a write of A that the resource accepted after it had
//     accepted a write of a later grant B.
package history

import (
	"sort"
	"time"
)

// Grant is one successful acquisition and what its holder did with it.
type Grant struct {
	// Client identifies the holder; grants of one client never overlap each
	// other by construction and are not compared.
	Client   int
	Resource string
	// Started is when the lock call was made; Acquired when it returned the
	// lock.
	Started, Acquired time.Time
	// Until is the validity end, as last extended.
	Until time.Time
	// Released is when Release was called; zero if never.
	Released time.Time
	// Token is the fencing token; 0 for none.
	Token uint64
	// Writes are the holder's writes to the resource.
	Writes []Write
	// Read marks a read lock of a read-write lock (CheckRW); the other
	// checks ignore it.
	Read bool
}

// Write is one write to the protected resource.
type Write struct {
	// At is when the write took effect.
	At time.Time
	// Seq orders writes that share an instant: the order in which the
	// resource handled them (any increasing numbering).
	Seq int
	// Accepted reports whether the fenced resource took the write.
	Accepted bool
}

// End is the end of the validity window: the earlier of Until and the
// release.
func (g *Grant) End() time.Time {
	if !g.Released.IsZero() && g.Released.Before(g.Until) {
		return g.Released
	}
	return g.Until
}

// occupancyEnd is the later of End and the last write.
func (g *Grant) occupancyEnd() time.Time {
	end := g.End()
	for _, w := range g.Writes {
		if w.At.After(end) {
			end = w.At
		}
	}
	return end
}

// later reports whether b is later than a.
func later(b, a *Grant) bool { return b.Started.After(a.Acquired) }

// Overlap is two grants, by index, that occupied one resource at once; A was
// acquired first.
type Overlap struct {
	A, B     int
	From, To time.Time
	// Lease: the validity windows intersect (not only a late write).
	Lease bool
}

// WriteRef names one write: Grants[Grant].Writes[Write].
type WriteRef struct{ Grant, Write int }

// TokenIssue is a fencing-order violation between grants A and B: equal
// tokens, or B later than A with a token not above A's.
type TokenIssue struct {
	A, B  int
	Equal bool
}

// Report is the verdict on one history. Indexes refer to the grants given to
// Check.
type Report struct {
	Grants, Writes int
	Overlaps       []Overlap
	// LooseOverlaps counts the pairs whose windows intersect when a window
	// starts at Started instead of Acquired: it includes legitimate
	// hand-overs, and is reported for comparison only.
	LooseOverlaps int
	// StaleAccepted are writes the fenced resource accepted although a later
	// grant had written before: fencing failed.
	StaleAccepted []WriteRef
	// UnfencedStale are the writes a resource without fencing would have
	// taken stale: what fencing prevents.
	UnfencedStale []WriteRef
	TokenOrder    []TokenIssue
	// RefusedValid are writes made inside the writer's validity that the
	// fenced resource refused.
	RefusedValid []WriteRef
	// LateWrites took effect after their validity ended.
	LateWrites []WriteRef
}

// Check applies the definitions of the package documentation to grants.
func Check(grants []*Grant) Report {
	r := Report{Grants: len(grants)}
	r.Overlaps, r.LooseOverlaps = overlaps(grants)
	r.TokenOrder = tokenOrder(grants)
	writes := sortedWrites(grants)
	r.Writes = len(writes)
	r.UnfencedStale, r.StaleAccepted = stale(grants, writes)
	for _, ref := range writes {
		g, w := grants[ref.Grant], grants[ref.Grant].Writes[ref.Write]
		switch {
		case !w.At.Before(g.Until) || !g.Released.IsZero() && w.At.After(g.Released):
			r.LateWrites = append(r.LateWrites, ref)
		case !w.Accepted:
			r.RefusedValid = append(r.RefusedValid, ref)
		}
	}
	return r
}

func overlaps(grants []*Grant) (found []Overlap, loose int) {
	for i, a := range grants {
		for j := i + 1; j < len(grants); j++ {
			b := grants[j]
			if a.Client == b.Client || a.Resource != b.Resource {
				continue
			}
			if latest(a.Started, b.Started).Before(earliest(a.End(), b.End())) {
				loose++
			}
			if o, ok := overlap(grants, i, j); ok {
				found = append(found, o)
			}
		}
	}
	return found, loose
}

// overlap reports whether grants i and j occupied the resource at once, for
// a positive duration.
func overlap(grants []*Grant, i, j int) (Overlap, bool) {
	a, b := grants[i], grants[j]
	from := latest(a.Acquired, b.Acquired)
	to := earliest(a.occupancyEnd(), b.occupancyEnd())
	if !from.Before(to) {
		return Overlap{}, false
	}
	o := Overlap{A: i, B: j, From: from, To: to, Lease: from.Before(earliest(a.End(), b.End()))}
	if b.Acquired.Before(a.Acquired) {
		o.A, o.B = j, i
	}
	return o, true
}

func tokenOrder(grants []*Grant) []TokenIssue {
	var issues []TokenIssue
	for i, a := range grants {
		for j := i + 1; j < len(grants); j++ {
			b := grants[j]
			if a.Token == 0 || b.Token == 0 || a.Resource != b.Resource {
				continue
			}
			switch {
			case a.Token == b.Token:
				issues = append(issues, TokenIssue{A: i, B: j, Equal: true})
			case later(b, a) && b.Token < a.Token:
				issues = append(issues, TokenIssue{A: i, B: j})
			case later(a, b) && a.Token < b.Token:
				issues = append(issues, TokenIssue{A: j, B: i})
			}
		}
	}
	return issues
}

// sortedWrites lists every write in the order the resource handled them.
func sortedWrites(grants []*Grant) []WriteRef {
	var refs []WriteRef
	for i, g := range grants {
		for j := range g.Writes {
			refs = append(refs, WriteRef{i, j})
		}
	}
	sort.SliceStable(refs, func(x, y int) bool {
		a, b := grants[refs[x].Grant].Writes[refs[x].Write], grants[refs[y].Grant].Writes[refs[y].Write]
		if !a.At.Equal(b.At) {
			return a.At.Before(b.At)
		}
		return a.Seq < b.Seq
	})
	return refs
}

// stale finds the writes made after a write of a later grant: every such
// write (unfenced), and those the fenced resource accepted after accepting
// the later grant's write (accepted).
func stale(grants []*Grant, writes []WriteRef) (unfenced, accepted []WriteRef) {
	for i, ref := range writes {
		g, w := grants[ref.Grant], grants[ref.Grant].Writes[ref.Write]
		for _, prev := range writes[:i] {
			p := grants[prev.Grant]
			if prev.Grant != ref.Grant && p.Resource == g.Resource && later(p, g) {
				unfenced = append(unfenced, ref)
				break
			}
		}
		if !w.Accepted {
			continue
		}
		for _, prev := range writes[:i] {
			p := grants[prev.Grant]
			if prev.Grant != ref.Grant && p.Resource == g.Resource && p.Writes[prev.Write].Accepted && later(p, g) {
				accepted = append(accepted, ref)
				break
			}
		}
	}
	return unfenced, accepted
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

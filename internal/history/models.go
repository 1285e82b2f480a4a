package history

import (
	"slices"
	"sort"
	"time"
)

// The models built on the lock (issue 27) are judged by the same windows:
// a grant's occupancy [Acquired, max(End, last write)] (see the package
// documentation). Unlike Check, which compares grants of different clients
// only, the model checks compare every pair of distinct grants of one
// resource: one client holding two leaderships, or a read and a write lock,
// at once is a violation too, and each permit of a semaphore counts as a
// holder whichever client holds it.

// ElectionReport is the verdict on the leaderships of an election: each
// grant is one leadership (Campaign's return to the end of its lease or its
// Resign), its Resource the election's name and its Token the term.
type ElectionReport struct {
	Leaders int
	// Overlaps: two leaders at once (Lease: their validity windows
	// intersect; otherwise a late write of a deposed leader).
	Overlaps []Overlap
	// TermOrder: B took over after A (by Acquired) with a term not above
	// A's; ordered by takeover, terms must strictly increase.
	TermOrder []TokenIssue
	// SameTerm: two leaders with one term (A before B by takeover), wherever
	// they are in the order.
	SameTerm []TokenIssue
}

// Violations counts the findings.
func (r ElectionReport) Violations() int {
	return len(r.Overlaps) + len(r.TermOrder) + len(r.SameTerm)
}

// CheckElection checks that an election has at most one leader at a time,
// that the terms strictly increase in the order the leaders took over, and
// that no two leaders share a term.
func CheckElection(leaders []*Grant) ElectionReport {
	r := ElectionReport{Leaders: len(leaders)}
	for _, ids := range byResource(leaders) {
		for x, i := range ids {
			for _, j := range ids[x+1:] {
				if o, ok := overlap(leaders, i, j); ok {
					r.Overlaps = append(r.Overlaps, o)
				}
			}
		}
		// Takeover order: by Acquired, then by index.
		order := append([]int(nil), ids...)
		sort.SliceStable(order, func(x, y int) bool {
			return leaders[order[x]].Acquired.Before(leaders[order[y]].Acquired)
		})
		for x := 1; x < len(order); x++ {
			a, b := order[x-1], order[x]
			if leaders[b].Token <= leaders[a].Token {
				r.TermOrder = append(r.TermOrder, TokenIssue{A: a, B: b, Equal: leaders[b].Token == leaders[a].Token})
			}
		}
		for x, a := range order {
			for _, b := range order[x+1:] {
				if leaders[a].Token == leaders[b].Token {
					r.SameTerm = append(r.SameTerm, TokenIssue{A: a, B: b, Equal: true})
				}
			}
		}
	}
	return r
}

// Crowd is a stretch of time [From, To) during which more grants occupied a
// semaphore than it has permits; Holders are their indexes, in order.
type Crowd struct {
	From, To time.Time
	Holders  []int
}

// SemaphoreReport is the verdict on the permits of semaphores of n permits:
// each grant is one permit, its Resource the semaphore's name.
type SemaphoreReport struct {
	Permits int
	// Crowds: more than n holders at once (each maximal stretch with one set
	// of holders).
	Crowds []Crowd
	// MostHolders is the largest number of permits held at once, for
	// comparison with n: a run that never reaches n did not contend.
	MostHolders int
}

// Violations counts the findings.
func (r SemaphoreReport) Violations() int { return len(r.Crowds) }

// CheckSemaphore checks that at no instant more than n permits of one
// semaphore were held (occupancies intersecting for a positive duration).
func CheckSemaphore(permits []*Grant, n int) SemaphoreReport {
	r := SemaphoreReport{Permits: len(permits)}
	for _, ids := range byResource(permits) {
		var times []time.Time
		for _, i := range ids {
			times = append(times, permits[i].Acquired, permits[i].occupancyEnd())
		}
		sort.Slice(times, func(x, y int) bool { return times[x].Before(times[y]) })
		var last *Crowd
		for x := 0; x+1 < len(times); x++ {
			from, to := times[x], times[x+1]
			if !from.Before(to) {
				continue
			}
			// Held during [from, to): no event falls strictly inside.
			var holders []int
			for _, i := range ids {
				if g := permits[i]; !g.Acquired.After(from) && g.occupancyEnd().After(from) {
					holders = append(holders, i)
				}
			}
			r.MostHolders = max(r.MostHolders, len(holders))
			if len(holders) <= n {
				last = nil
				continue
			}
			if last != nil && last.To.Equal(from) && slices.Equal(last.Holders, holders) {
				last.To = to
				continue
			}
			r.Crowds = append(r.Crowds, Crowd{From: from, To: to, Holders: holders})
			last = &r.Crowds[len(r.Crowds)-1]
		}
	}
	return r
}

// RWReport is the verdict on the grants of read-write locks: Read marks the
// read locks.
type RWReport struct {
	Reads, Writes int
	// ReaderWriter: a reader while a writer held (A and B in the order they
	// were acquired).
	ReaderWriter []Overlap
	// Writers: two writers at once.
	Writers []Overlap
	// TokenOrder: fencing-order violations among the writers' tokens (as
	// Report.TokenOrder).
	TokenOrder []TokenIssue
	// SharedReads counts the pairs of readers that held at once: allowed,
	// and reported to tell that readers did share.
	SharedReads int
}

// Violations counts the findings.
func (r RWReport) Violations() int { return len(r.ReaderWriter) + len(r.Writers) + len(r.TokenOrder) }

// CheckRW checks that a read-write lock never had a reader while a writer
// held it, nor two writers at once, and that the writers' fencing tokens
// are in order.
func CheckRW(grants []*Grant) RWReport {
	var r RWReport
	var writers []*Grant
	index := map[*Grant]int{}
	for i, g := range grants {
		if g.Read {
			r.Reads++
		} else {
			r.Writes++
			index[g] = i
			writers = append(writers, g)
		}
	}
	for _, ids := range byResource(grants) {
		for x, i := range ids {
			for _, j := range ids[x+1:] {
				o, ok := overlap(grants, i, j)
				switch {
				case !ok:
				case grants[i].Read && grants[j].Read:
					r.SharedReads++
				case grants[i].Read || grants[j].Read:
					r.ReaderWriter = append(r.ReaderWriter, o)
				default:
					r.Writers = append(r.Writers, o)
				}
			}
		}
	}
	for _, t := range tokenOrder(writers) {
		r.TokenOrder = append(r.TokenOrder, TokenIssue{A: index[writers[t.A]], B: index[writers[t.B]], Equal: t.Equal})
	}
	return r
}

// byResource groups the indexes of grants by resource, in index order, the
// groups in the order their resources first appear.
func byResource(grants []*Grant) [][]int {
	var groups [][]int
	at := map[string]int{}
	for i, g := range grants {
		k, ok := at[g.Resource]
		if !ok {
			k = len(groups)
			at[g.Resource] = k
			groups = append(groups, nil)
		}
		groups[k] = append(groups[k], i)
	}
	return groups
}

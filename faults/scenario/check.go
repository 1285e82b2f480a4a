package scenario

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Grant is one successful acquisition and what its holder did with it, all
// times read from this process' clock (with monotonic readings).
type Grant struct {
	// ID numbers grants in the order they were granted, from 1.
	ID int
	// Client is the index of the client that holds the lock.
	Client int
	// Resource is the locked resource.
	Resource string
	// Sent is when the acquisition attempt that succeeded was started (before
	// any request left); Reply is when it returned the lock.
	Sent, Reply time.Time
	// Until is the lock's validity end: Lock.Until at the grant, moved by
	// every successful extension.
	Until time.Time
	// Extensions are the holder's calls to Lock.Extend.
	Extensions []Extension
	// Token is the fencing token (0 when Fence failed).
	Token uint64
	// FenceErr is Lock.Fence's error, if any.
	FenceErr error
	// Writes are the holder's writes to the fenced resource.
	Writes []Write
	// Pinned marks the holder the fault injector held the lock with.
	Pinned bool
	// ReleaseStart and ReleaseEnd bracket the call to Lock.Release, whose
	// error is ReleaseErr.
	ReleaseStart, ReleaseEnd time.Time
	ReleaseErr               error
}

// Extension is one call to Lock.Extend.
type Extension struct {
	Sent, Done time.Time
	// Until is the new validity end when Err is nil.
	Until time.Time
	Err   error
}

// Write is one write to the fenced resource.
type Write struct {
	// At is when the write was handed to the resource (after the holder checked
	// time.Now().Before(Until)).
	At time.Time
	// Accepted reports whether the resource accepted the token; Err is its
	// refusal otherwise.
	Accepted bool
	Err      error
}

// End is the end of the grant's holding window: the earlier of Until and the
// start of the release. After it the holder does nothing under the lock.
func (g *Grant) End() time.Time {
	if !g.ReleaseStart.IsZero() && g.ReleaseStart.Before(g.Until) {
		return g.ReleaseStart
	}
	return g.Until
}

// Accepted is one write a Resource accepted, in the order it accepted them.
type Accepted struct {
	Resource string
	Grant    int
	Client   int
	Token    uint64
	At       time.Time
}

// Overlap is a pair of grants of one resource, to different clients, whose
// holding windows [Reply, End] intersect: for Duration, both clients held the
// lock by their own clocks, which mutual exclusion forbids.
type Overlap struct {
	A, B     *Grant
	From, To time.Time
}

// Duration is how long both held the lock.
func (o Overlap) Duration() time.Duration { return o.To.Sub(o.From) }

// Stale is an accepted write that a fenced resource should have refused: its
// token was lower than one accepted before, or equal to one accepted from a
// different grant.
type Stale struct {
	Write    Accepted
	Previous Accepted // the write holding the highest token at that point
}

// Result is what the checker found in a run.
type Result struct {
	Acquisitions  int
	Overlaps      []Overlap
	StaleAccepted []Stale
	// LooseOverlaps counts the pairs whose windows intersect when a window
	// starts at Sent instead of Reply: it includes legitimate hand-overs (a
	// request sent before the previous holder's release landed), so it is
	// reported for comparison only.
	LooseOverlaps int
	// Counts for the report.
	WritesAccepted, WritesRefused, FenceErrors, ReleaseErrors int
	Extended, ExtendErrors                                    int
}

// Check finds overlapping holders and stale accepted writes. grants may be in
// any order; accepted must be in the order the resources accepted the writes
// (per resource).
//
// A holding window is [Reply, End]: from the moment Lock returned to the
// moment the holder stopped relying on it (Until, or the start of Release if
// earlier). Every write the holder made lies inside it. The window starts at
// Reply rather than Sent because a request sent while the previous holder
// still held the lock can legitimately be granted once that holder's release
// has landed; starting at Sent would report such hand-overs as overlaps.
func Check(grants []*Grant, accepted []Accepted) Result {
	res := Result{Acquisitions: len(grants)}
	byRes := map[string][]*Grant{}
	for _, g := range grants {
		byRes[g.Resource] = append(byRes[g.Resource], g)
		if g.FenceErr != nil {
			res.FenceErrors++
		}
		if g.ReleaseErr != nil {
			res.ReleaseErrors++
		}
		for _, e := range g.Extensions {
			if e.Err != nil {
				res.ExtendErrors++
			} else {
				res.Extended++
			}
		}
		for _, w := range g.Writes {
			if w.Accepted {
				res.WritesAccepted++
			} else {
				res.WritesRefused++
			}
		}
	}
	names := make([]string, 0, len(byRes))
	for name := range byRes {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		gs := byRes[name]
		sort.Slice(gs, func(i, j int) bool { return gs[i].Reply.Before(gs[j].Reply) })
		for j, b := range gs {
			for _, a := range gs[:j] {
				if a.Client == b.Client {
					continue
				}
				from, to := b.Reply, a.End() // a.Reply <= b.Reply
				if b.End().Before(to) {
					to = b.End()
				}
				if from.Before(to) {
					res.Overlaps = append(res.Overlaps, Overlap{A: a, B: b, From: from, To: to})
				}
				if laterOf(a.Sent, b.Sent).Before(earlierOf(a.End(), b.End())) {
					res.LooseOverlaps++
				}
			}
		}
	}

	highest := map[string]Accepted{}
	for _, w := range accepted {
		h, seen := highest[w.Resource]
		switch {
		case !seen || w.Token > h.Token:
			highest[w.Resource] = w
		case w.Token < h.Token || w.Grant != h.Grant:
			res.StaleAccepted = append(res.StaleAccepted, Stale{Write: w, Previous: h})
		}
	}
	return res
}

// Note is an event of the fault injector, shown in the timeline.
type Note struct {
	At   time.Time
	Text string
}

// Timeline renders a stretch of the timeline, relative to origin, one event
// per line: the events of the grants of resource (all resources if empty) and
// the injector's notes within span of focus, and every event of the grants in
// mark (flagged "!!") whenever it happened. With limit > 0, unmarked events
// farthest from focus are dropped to keep at most limit lines.
func Timeline(origin, focus time.Time, span time.Duration, resource string, grants []*Grant, notes []Note, mark map[int]bool, limit int) string {
	type line struct {
		at     time.Time
		text   string
		sticky bool
	}
	var ls []line
	from, to := focus.Add(-span), focus.Add(span)
	add := func(sticky bool, t time.Time, format string, args ...any) {
		if t.IsZero() || (!sticky && (t.Before(from) || t.After(to))) {
			return
		}
		ls = append(ls, line{t, fmt.Sprintf(format, args...), sticky})
	}
	rel := func(t time.Time) string {
		return fmt.Sprintf("%+.3fms", float64(t.Sub(origin).Microseconds())/1000)
	}
	for _, g := range grants {
		if resource != "" && g.Resource != resource {
			continue
		}
		m := mark[g.ID]
		flag := "  "
		if m {
			flag = "!!"
		}
		who := fmt.Sprintf("%s client=%d %s grant=%d", flag, g.Client, g.Resource, g.ID)
		if g.Pinned {
			who += " (pinned)"
		}
		add(m, g.Sent, "%s acquire request sent", who)
		add(m, g.Reply, "%s granted, validity until %s", who, rel(g.Until))
		if g.FenceErr != nil {
			add(m, g.Reply, "%s fence failed: %v", who, g.FenceErr)
		}
		for _, w := range g.Writes {
			if w.Accepted {
				add(m, w.At, "%s write with token %d accepted", who, g.Token)
			} else {
				add(m, w.At, "%s write with token %d refused: %v", who, g.Token, w.Err)
			}
		}
		for _, e := range g.Extensions {
			add(m, e.Sent, "%s extend sent", who)
			if e.Err != nil {
				add(m, e.Done, "%s extend failed: %v", who, e.Err)
			} else {
				add(m, e.Done, "%s extended, validity until %s", who, rel(e.Until))
			}
		}
		if !g.Until.IsZero() && (g.ReleaseStart.IsZero() || g.Until.Before(g.ReleaseStart)) {
			add(m, g.Until, "%s validity ends", who)
		}
		add(m, g.ReleaseStart, "%s release sent", who)
		if g.ReleaseErr != nil {
			add(m, g.ReleaseEnd, "%s release failed: %v", who, g.ReleaseErr)
		} else {
			add(m, g.ReleaseEnd, "%s released", who)
		}
	}
	for _, n := range notes {
		add(false, n.At, "** fault: %s", n.Text)
	}
	if limit > 0 && len(ls) > limit {
		dist := func(l line) time.Duration {
			if l.sticky || strings.HasPrefix(l.text, "** ") {
				return -1
			}
			d := l.at.Sub(focus)
			if d < 0 {
				return -d
			}
			return d
		}
		sort.SliceStable(ls, func(i, j int) bool { return dist(ls[i]) < dist(ls[j]) })
		ls = ls[:limit]
	}
	sort.SliceStable(ls, func(i, j int) bool { return ls[i].at.Before(ls[j].at) })
	var b strings.Builder
	for _, l := range ls {
		fmt.Fprintf(&b, "  %12s %s\n", rel(l.at), l.text)
	}
	return b.String()
}

func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlierOf(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

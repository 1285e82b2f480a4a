package scenario

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/redlock-go/redlock/internal/history"
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
	// At is when the resource handled the write; Seq numbers the writes of
	// one resource in the order it handled them.
	At  time.Time
	Seq int
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

// Overlap is a pair of grants of one resource, to different clients, whose
// holding windows [Reply, End] intersect: for Duration, both clients held the
// lock by their own clocks, which mutual exclusion forbids.
type Overlap struct {
	A, B     *Grant
	From, To time.Time
}

// Duration is how long both held the lock.
func (o Overlap) Duration() time.Duration { return o.To.Sub(o.From) }

// Stale is a write the fenced resource accepted after it had accepted a
// write of a later grant (one whose lock call started after Grant's
// returned): fencing failed.
type Stale struct {
	Grant *Grant
	Write Write
}

// Result is what the checker found in a run.
type Result struct {
	Acquisitions  int
	Overlaps      []Overlap
	StaleAccepted []Stale
	// Constructed are the overlaps of the counterexamples the run
	// constructed (Run.Counterexample), among Overlaps; Finish fills it.
	Constructed []Overlap
	// TokenOrder counts fencing-order violations: two grants of a resource
	// with one token, or a later grant with a lower token.
	TokenOrder int
	// LooseOverlaps counts the pairs whose windows intersect when a window
	// starts at Sent instead of Reply: it includes legitimate hand-overs (a
	// request sent before the previous holder's release landed), so it is
	// reported for comparison only.
	LooseOverlaps int
	// Counts for the report.
	WritesAccepted, WritesRefused, FenceErrors, ReleaseErrors int
	Extended, ExtendErrors                                    int
}

// Check judges the grants of a run by the definitions of internal/history,
// which the simulation shares. A holding window is [Reply, End]: from the
// moment Lock returned to the moment the holder stopped relying on it (Until,
// or the start of Release if earlier). It starts at Reply rather than Sent
// because a request sent while the previous holder still held the lock can
// legitimately be granted once that holder's release has landed.
func Check(grants []*Grant) Result {
	res := Result{Acquisitions: len(grants)}
	in := make([]*history.Grant, len(grants))
	for i, g := range grants {
		in[i] = &history.Grant{Client: g.Client, Resource: g.Resource, Started: g.Sent, Acquired: g.Reply,
			Until: g.Until, Released: g.ReleaseStart, Token: g.Token}
		for _, w := range g.Writes {
			in[i].Writes = append(in[i].Writes, history.Write{At: w.At, Seq: w.Seq, Accepted: w.Accepted})
		}
		res.count(g)
	}
	v := history.Check(in)
	for _, o := range v.Overlaps {
		res.Overlaps = append(res.Overlaps, Overlap{A: grants[o.A], B: grants[o.B], From: o.From, To: o.To})
	}
	for _, s := range v.StaleAccepted {
		res.StaleAccepted = append(res.StaleAccepted, Stale{Grant: grants[s.Grant], Write: grants[s.Grant].Writes[s.Write]})
	}
	res.TokenOrder, res.LooseOverlaps = len(v.TokenOrder), v.LooseOverlaps
	return res
}

func (res *Result) count(g *Grant) {
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

package history_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/redlock-go/redlock/internal/history"
)

// leader is a leadership of election e by client c with term: returned by
// Campaign at acq, valid until until, resigned at rel (0: never).
func leader(c int, term uint64, acq, until, rel int) *history.Grant {
	g := grant(c, "e", acq, acq, until, rel)
	g.Token = term
	return g
}

func TestCheckElection(t *testing.T) {
	type pair struct{ a, b int }
	paused := leader(0, 1, 0, 100, 0)
	paused.Writes = []history.Write{{At: ms(150), Accepted: true}} // a deposed leader's late write
	other := leader(2, 1, 5, 50, 0)
	other.Resource = "other" // another election: its own terms
	for _, tc := range []struct {
		name      string
		leaders   []*history.Grant
		overlaps  []pair
		termOrder []history.TokenIssue
		sameTerm  []history.TokenIssue
	}{
		{name: "empty"},
		{
			name: "hand-overs",
			leaders: []*history.Grant{
				leader(0, 1, 0, 100, 40),  // resigns at 40
				leader(1, 2, 40, 140, 0),  // takes over at once, lapses at 140
				leader(0, 5, 150, 250, 0), // terms may skip
				leader(1, 6, 250, 350, 0), // takes over as 5 lapses
				other,                     // another election, term 1 again
				leader(3, 3, 400, 400, 0), // an empty window still takes its turn: 3 after 6
			},
			termOrder: []history.TokenIssue{{A: 3, B: 5}},
		},
		{
			name: "two leaders at once",
			leaders: []*history.Grant{
				leader(0, 1, 0, 100, 0),
				leader(1, 2, 90, 190, 0), // 10 ms too early
			},
			overlaps: []pair{{0, 1}},
		},
		{
			name: "one client, two leaderships at once",
			leaders: []*history.Grant{
				leader(0, 1, 0, 100, 0),
				leader(0, 2, 50, 150, 0),
			},
			overlaps: []pair{{0, 1}},
		},
		{
			name: "late write of a deposed leader",
			leaders: []*history.Grant{
				paused,
				leader(1, 2, 120, 220, 0),
			},
			overlaps: []pair{{0, 1}},
		},
		{
			name: "term goes back",
			leaders: []*history.Grant{
				leader(1, 4, 200, 300, 0), // listed first, took over last
				leader(0, 5, 0, 100, 0),
			},
			termOrder: []history.TokenIssue{{A: 1, B: 0}},
		},
		{
			name: "one term, two leaders",
			leaders: []*history.Grant{
				leader(0, 1, 0, 100, 0),
				leader(1, 2, 100, 200, 0),
				leader(2, 1, 200, 300, 0), // the first leader's term again
			},
			termOrder: []history.TokenIssue{{A: 1, B: 2}},
			sameTerm:  []history.TokenIssue{{A: 0, B: 2, Equal: true}},
		},
		{
			name: "one term, consecutive",
			leaders: []*history.Grant{
				leader(0, 7, 0, 100, 0),
				leader(1, 7, 100, 200, 0),
			},
			termOrder: []history.TokenIssue{{A: 0, B: 1, Equal: true}},
			sameTerm:  []history.TokenIssue{{A: 0, B: 1, Equal: true}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := history.CheckElection(tc.leaders)
			var got []pair
			for _, o := range r.Overlaps {
				got = append(got, pair{o.A, o.B})
			}
			assert.Equal(t, len(tc.leaders), r.Leaders)
			assert.Equal(t, tc.overlaps, got)
			assert.Equal(t, tc.termOrder, r.TermOrder)
			assert.Equal(t, tc.sameTerm, r.SameTerm)
			assert.Equal(t, len(tc.overlaps)+len(tc.termOrder)+len(tc.sameTerm), r.Violations())
		})
	}
}

// permit of semaphore s held by client c from acq until until, released at
// rel (0: never).
func permit(c int, acq, until, rel int) *history.Grant { return grant(c, "s", acq, acq, until, rel) }

func TestCheckSemaphore(t *testing.T) {
	late := permit(2, 0, 100, 0)
	late.Writes = []history.Write{{At: ms(130), Accepted: true}} // acts 30 ms past its validity
	other := permit(3, 0, 1000, 0)
	other.Resource = "t" // another semaphore
	for _, tc := range []struct {
		name    string
		n       int
		permits []*history.Grant
		crowds  []history.Crowd
		most    int
	}{
		{name: "empty", n: 2},
		{
			name: "n holders, hand-overs at one instant",
			n:    2,
			permits: []*history.Grant{
				permit(0, 0, 100, 0),
				permit(1, 10, 110, 50),
				permit(1, 50, 150, 0),  // takes over the released permit at 50
				permit(2, 100, 200, 0), // takes over the lapsed permit at 100
				other,
			},
			most: 2,
		},
		{
			name: "one client holds two permits",
			n:    2,
			permits: []*history.Grant{
				permit(0, 0, 100, 0),
				permit(0, 10, 100, 0),
			},
			most: 2,
		},
		{
			name: "n+1 holders",
			n:    2,
			permits: []*history.Grant{
				permit(0, 0, 100, 0),
				permit(1, 10, 110, 0),
				permit(2, 90, 190, 0), // with 0 and 1 during [90, 100)
				permit(3, 95, 195, 0), // with 1 and 2 during [100, 110), and 0 too before
			},
			crowds: []history.Crowd{
				{From: ms(90), To: ms(95), Holders: []int{0, 1, 2}},
				{From: ms(95), To: ms(100), Holders: []int{0, 1, 2, 3}},
				{From: ms(100), To: ms(110), Holders: []int{1, 2, 3}},
			},
			most: 4,
		},
		{
			name: "late action makes a crowd",
			n:    1,
			permits: []*history.Grant{
				late,
				permit(0, 100, 200, 0),
			},
			crowds: []history.Crowd{{From: ms(100), To: ms(130), Holders: []int{0, 1}}},
			most:   2,
		},
		{
			name: "a stretch with one set of holders is one crowd",
			n:    1,
			permits: []*history.Grant{
				permit(0, 0, 100, 0),
				permit(1, 20, 80, 0),
				permit(2, 150, 160, 0), // a later event inside no crowd
			},
			crowds: []history.Crowd{{From: ms(20), To: ms(80), Holders: []int{0, 1}}},
			most:   2,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := history.CheckSemaphore(tc.permits, tc.n)
			assert.Equal(t, len(tc.permits), r.Permits)
			assert.Equal(t, tc.crowds, r.Crowds)
			assert.Equal(t, tc.most, r.MostHolders)
			assert.Equal(t, len(tc.crowds), r.Violations())
		})
	}
}

// reader and writer of resource r by client c from acq until until,
// released at rel (0: never).
func reader(c int, acq, until, rel int) *history.Grant {
	g := grant(c, "r", acq, acq, until, rel)
	g.Read = true
	return g
}

func writer(c int, token uint64, acq, until, rel int) *history.Grant {
	g := grant(c, "r", acq, acq, until, rel)
	g.Token = token
	return g
}

func TestCheckRW(t *testing.T) {
	type pair struct {
		a, b  int
		d     time.Duration
		lease bool
	}
	late := writer(0, 0, 0, 100, 0)
	late.Writes = []history.Write{{At: ms(120), Accepted: true}}
	otherW := writer(5, 0, 0, 100, 0)
	otherW.Resource = "q"
	for _, tc := range []struct {
		name          string
		grants        []*history.Grant
		readerWriter  []pair
		writers       []pair
		tokenOrder    []history.TokenIssue
		shared, reads int
	}{
		{name: "empty"},
		{
			name: "readers share, writers take turns",
			grants: []*history.Grant{
				reader(0, 0, 100, 50),
				reader(1, 10, 110, 60),
				reader(1, 20, 120, 0), // one client, two readers: allowed
				writer(2, 1, 120, 220, 200),
				writer(3, 2, 200, 300, 0),
				reader(0, 300, 400, 0),
				otherW, // another resource
			},
			shared: 3, reads: 4,
		},
		{
			name: "reader beside a writer",
			grants: []*history.Grant{
				writer(0, 0, 0, 100, 0),
				reader(1, 90, 190, 0),
				reader(2, 95, 195, 0),
			},
			readerWriter: []pair{{0, 1, 10 * time.Millisecond, true}, {0, 2, 5 * time.Millisecond, true}},
			shared:       1, reads: 2,
		},
		{
			name: "writer while readers hold",
			grants: []*history.Grant{
				reader(0, 0, 100, 0),
				writer(0, 0, 60, 160, 0), // the same client: still a violation
			},
			readerWriter: []pair{{0, 1, 40 * time.Millisecond, true}},
			reads:        1,
		},
		{
			name: "two writers",
			grants: []*history.Grant{
				writer(0, 1, 0, 100, 0),
				writer(1, 2, 50, 150, 0),
			},
			writers: []pair{{0, 1, 50 * time.Millisecond, true}},
		},
		{
			name: "a writer's late write",
			grants: []*history.Grant{
				late,
				writer(1, 0, 100, 200, 0),
			},
			writers: []pair{{0, 1, 20 * time.Millisecond, false}},
		},
		{
			name: "writers' tokens out of order",
			grants: []*history.Grant{
				writer(0, 5, 0, 100, 50),
				writer(1, 4, 60, 160, 0), // called after 0 returned: must be above 5
				reader(2, 200, 300, 0),
			},
			tokenOrder: []history.TokenIssue{{A: 0, B: 1}},
			reads:      1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := history.CheckRW(tc.grants)
			conv := func(os []history.Overlap) []pair {
				var out []pair
				for _, o := range os {
					out = append(out, pair{o.A, o.B, o.To.Sub(o.From), o.Lease})
				}
				return out
			}
			assert.Equal(t, tc.readerWriter, conv(r.ReaderWriter))
			assert.Equal(t, tc.writers, conv(r.Writers))
			assert.Equal(t, tc.tokenOrder, r.TokenOrder)
			assert.Equal(t, tc.shared, r.SharedReads)
			assert.Equal(t, tc.reads, r.Reads)
			assert.Equal(t, len(tc.grants)-tc.reads, r.Writes)
			assert.Equal(t, len(tc.readerWriter)+len(tc.writers)+len(tc.tokenOrder), r.Violations())
		})
	}
}

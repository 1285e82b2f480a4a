package history_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/internal/history"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

// grant of resource r to client c: called at start, returned at acq, valid
// until until, released at rel (0: never).
func grant(c int, r string, start, acq, until, rel int) *history.Grant {
	g := &history.Grant{Client: c, Resource: r, Started: ms(start), Acquired: ms(acq), Until: ms(until)}
	if rel > 0 {
		g.Released = ms(rel)
	}
	return g
}

func TestOverlaps(t *testing.T) {
	late := grant(4, "a", 200, 201, 250, 0)
	late.Writes = []history.Write{{At: ms(320), Accepted: true}} // paused past its validity
	grants := []*history.Grant{
		grant(0, "a", 0, 1, 100, 10),    // 0: [1, 10]
		grant(1, "a", 9, 10, 110, 20),   // 1: [10, 20]: touches 0, loose overlap only
		grant(2, "a", 14, 15, 115, 0),   // 2: [15, 115]: overlaps 1 by 5ms
		grant(2, "a", 116, 117, 130, 0), // 3: same client as 2: never compared with it
		grant(3, "b", 16, 16, 200, 0),   // 4: another resource
		late,                            // 5: [201, 250) valid, occupies to 320
		grant(5, "a", 300, 301, 400, 0), // 6: action overlap with 5 during [301, 320]
		grant(6, "a", 500, 600, 550, 0), // 7: returned after its validity: empty window
	}
	r := history.Check(grants)
	type pair struct {
		a, b  int
		d     time.Duration
		lease bool
	}
	var got []pair
	for _, o := range r.Overlaps {
		got = append(got, pair{o.A, o.B, o.To.Sub(o.From), o.Lease})
	}
	assert.ElementsMatch(t, []pair{
		{1, 2, 5 * time.Millisecond, true},
		{5, 6, 19 * time.Millisecond, false},
	}, got)
	assert.Equal(t, 2, r.LooseOverlaps) // the 0-1 hand-over and 1-2; not 5-6 (writes do not count)
	require.Len(t, r.LateWrites, 1)
	assert.Equal(t, history.WriteRef{Grant: 5, Write: 0}, r.LateWrites[0])
}

func TestTokensAndStaleWrites(t *testing.T) {
	a := grant(0, "r", 0, 1, 100, 0)                                               // 0
	b := grant(1, "r", 50, 51, 200, 0)                                             // 1: later than a
	c := grant(2, "r", 0, 2, 100, 0)                                               // 2: concurrent with a
	d := grant(3, "other", 60, 61, 200, 0)                                         // 3: another resource
	a.Token, b.Token, c.Token, d.Token = 5, 4, 5, 1                                // b below a; a and c equal
	b.Writes = []history.Write{{At: ms(60), Accepted: true}}                       // b writes first
	a.Writes = []history.Write{{At: ms(70), Accepted: true}, {At: ms(70), Seq: 1}} // a after b: stale, taken, then refused
	c.Writes = []history.Write{{At: ms(10), Accepted: true}}                       // before b: not stale
	d.Writes = []history.Write{{At: ms(80), Accepted: true}}                       // other resource: not stale
	r := history.Check([]*history.Grant{a, b, c, d})
	assert.Equal(t, 5, r.Writes)
	assert.ElementsMatch(t, []history.TokenIssue{{A: 0, B: 1}, {A: 0, B: 2, Equal: true}, {A: 2, B: 1}}, r.TokenOrder)
	assert.Equal(t, []history.WriteRef{{Grant: 0, Write: 0}}, r.StaleAccepted)
	assert.Equal(t, []history.WriteRef{{Grant: 0, Write: 0}, {Grant: 0, Write: 1}}, r.UnfencedStale)
	assert.Equal(t, []history.WriteRef{{Grant: 0, Write: 1}}, r.RefusedValid)
	assert.Empty(t, r.LateWrites)
}

func TestEmpty(t *testing.T) {
	r := history.Check(nil)
	assert.Zero(t, r.Grants)
	assert.Empty(t, r.Overlaps)
}

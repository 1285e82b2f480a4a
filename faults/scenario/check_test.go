package scenario_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/faults/scenario"
)

// grant builds a grant of resource r to client c, granted at reply ms after
// t0, valid until until ms, released at rel ms (0: never).
func grant(t0 time.Time, id, c int, r string, reply, until, rel int) *scenario.Grant {
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	g := &scenario.Grant{ID: id, Client: c, Resource: r, Sent: ms(reply - 1), Reply: ms(reply), Until: ms(until)}
	if rel > 0 {
		g.ReleaseStart, g.ReleaseEnd = ms(rel), ms(rel+1)
	}
	return g
}

func TestCheckOverlaps(t *testing.T) {
	t0 := time.Now()
	grants := []*scenario.Grant{
		grant(t0, 1, 0, "a", 0, 100, 10),   // [0, 10]
		grant(t0, 2, 1, "a", 10, 110, 20),  // [10, 20]: touches 1, no overlap
		grant(t0, 3, 2, "a", 15, 115, 0),   // [15, 115]: overlaps 2 by 5ms
		grant(t0, 4, 3, "a", 100, 200, 0),  // [100, 200]: overlaps 3 by 15ms
		grant(t0, 5, 2, "a", 114, 300, 0),  // same client as 3: ignored with 3; overlaps 4
		grant(t0, 6, 1, "b", 16, 200, 0),   // another resource
		grant(t0, 7, 0, "a", 300, 250, 0),  // reply after until: empty window
		grant(t0, 8, 1, "a", 30, 130, 120), // window [30, 120]: overlaps 3 and 4
	}
	res := scenario.Check(grants)
	assert.Equal(t, 8, res.Acquisitions)
	type pair struct{ a, b int }
	got := map[pair]time.Duration{}
	for _, o := range res.Overlaps {
		got[pair{o.A.ID, o.B.ID}] = o.Duration()
	}
	assert.Equal(t, map[pair]time.Duration{
		{2, 3}: 5 * time.Millisecond,
		{3, 8}: 85 * time.Millisecond,
		{3, 4}: 15 * time.Millisecond,
		{8, 4}: 20 * time.Millisecond,
		{4, 5}: 86 * time.Millisecond,
		{8, 5}: 6 * time.Millisecond,
	}, got)
	// From the request sent, the hand-over from 1 to 2 (sent at 9, before 1's
	// release at 10) intersects too.
	assert.Equal(t, 7, res.LooseOverlaps)
}

func TestCheckStale(t *testing.T) {
	t0 := time.Now()
	at := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	a := grant(t0, 1, 0, "a", 0, 100, 0)  // called at -1, returned at 0
	b := grant(t0, 2, 1, "a", 50, 200, 0) // later than a
	c := grant(t0, 3, 2, "b", 60, 200, 0) // another resource
	a.Token, b.Token, c.Token = 2, 1, 1   // b's token is below a's: order broken
	b.Writes = []scenario.Write{{At: at(60), Seq: 1, Accepted: true}}
	a.Writes = []scenario.Write{
		{At: at(70), Seq: 2, Accepted: true},                        // after the later grant's write: stale
		{At: at(80), Seq: 3, Err: errors.New("fence: stale token")}, // refused: fine
	}
	c.Writes = []scenario.Write{{At: at(65), Seq: 1, Accepted: true}}
	res := scenario.Check([]*scenario.Grant{a, b, c})
	require.Len(t, res.StaleAccepted, 1)
	assert.Equal(t, 1, res.StaleAccepted[0].Grant.ID)
	assert.Equal(t, 2, res.StaleAccepted[0].Write.Seq)
	assert.Equal(t, 1, res.TokenOrder)
}

func TestCheckCounts(t *testing.T) {
	t0 := time.Now()
	g := grant(t0, 1, 0, "a", 0, 100, 10)
	g.Writes = []scenario.Write{{At: t0, Accepted: true}, {At: t0, Err: errors.New("stale")}}
	g.ReleaseErr = errors.New("lost")
	g.Extensions = []scenario.Extension{{Sent: t0}, {Sent: t0, Err: errors.New("lost")}, {Sent: t0}}
	h := grant(t0, 2, 1, "a", 20, 100, 30)
	h.FenceErr = errors.New("no fence")
	res := scenario.Check([]*scenario.Grant{g, h})
	assert.Equal(t, 1, res.WritesAccepted)
	assert.Equal(t, 1, res.WritesRefused)
	assert.Equal(t, 1, res.FenceErrors)
	assert.Equal(t, 1, res.ReleaseErrors)
	assert.Equal(t, 2, res.Extended)
	assert.Equal(t, 1, res.ExtendErrors)
	assert.Empty(t, res.Overlaps)
}

func TestTimeline(t *testing.T) {
	t0 := time.Now()
	a := grant(t0, 1, 0, "a", 0, 100, 0)
	a.Token = 7
	a.Writes = []scenario.Write{{At: t0.Add(time.Millisecond), Accepted: true}}
	b := grant(t0, 2, 1, "a", 50, 150, 60)
	b.Writes = []scenario.Write{{At: t0.Add(55 * time.Millisecond), Err: errors.New("fence: stale token")}}
	b.ReleaseErr = errors.New("lock lost")
	b.Extensions = []scenario.Extension{{Sent: t0.Add(56 * time.Millisecond), Done: t0.Add(57 * time.Millisecond), Err: errors.New("lost")}}
	c := grant(t0, 3, 2, "other", 50, 150, 60)
	notes := []scenario.Note{{At: t0.Add(40 * time.Millisecond), Text: "kill node 1"}}

	out := scenario.Timeline(t0, t0.Add(100*time.Millisecond), 101*time.Millisecond, "a",
		[]*scenario.Grant{a, b, c}, notes, map[int]bool{2: true}, 0)
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	require.Len(t, lines, 12, out)
	assert.Contains(t, lines[0], "-1.000ms")
	assert.Contains(t, lines[0], "client=0 a grant=1 acquire request sent")
	assert.Contains(t, lines[2], "write with token 7 accepted")
	assert.Contains(t, lines[3], "** fault: kill node 1")
	assert.Contains(t, out, "!! client=1 a grant=2 granted, validity until +150.000ms")
	assert.Contains(t, out, "write with token 0 refused: fence: stale token")
	assert.Contains(t, out, "release failed: lock lost")
	assert.Contains(t, out, "grant=2 extend failed: lost")
	assert.Contains(t, out, "client=0 a grant=1 validity ends")
	assert.NotContains(t, out, "other")

	// A narrow span keeps the marked grant's events and the notes in it.
	narrow := scenario.Timeline(t0, t0.Add(55*time.Millisecond), 20*time.Millisecond, "a",
		[]*scenario.Grant{a, b, c}, notes, map[int]bool{2: true}, 0)
	assert.Len(t, strings.Split(strings.TrimRight(narrow, "\n"), "\n"), 8, narrow)
	assert.NotContains(t, narrow, "grant=1 ")

	// A limit drops the unmarked events farthest from the focus first.
	short := scenario.Timeline(t0, t0, 200*time.Millisecond, "a",
		[]*scenario.Grant{a, b, c}, notes, map[int]bool{2: true}, 9)
	lines = strings.Split(strings.TrimRight(short, "\n"), "\n")
	require.Len(t, lines, 9, short)
	assert.Contains(t, short, "grant=1 granted")
	assert.NotContains(t, short, "grant=1 validity ends")
}

package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/clock"
	"github.com/redlock-go/redlock/node"
)

// memNode is an in-memory node for property tests of the fencing protocol: the
// point is to drive the real client through many random interleavings of
// grants, expiries, outages and wipes, and to record on the node side which lock
// window each write-back landed in.
type memNode struct {
	// node.Node's queues, watches and probe are not modelled: the property
	// test makes single attempts (TryLock) only, which call none of them but
	// the release (ReleaseFair, below); another would panic on this nil
	// interface.
	node.Node
	name  string
	clk   *clock.Fake
	mu    sync.Mutex
	down  bool
	keys  map[string]memEntry
	fence map[string]uint64
	win   int // lock windows granted so far on this node
	log   *writeLog
}

type memEntry struct {
	val    string
	exp    time.Time
	window int
}

// writeBack is one successful write-back: on node, inside lock window, by owner,
// of token.
type writeBack struct {
	node   string
	window int
	owner  string
	token  uint64
}

type writeLog struct {
	mu  sync.Mutex
	all []writeBack
}

func newMemNode(name string, clk *clock.Fake, log *writeLog) *memNode {
	return &memNode{name: name, clk: clk, keys: map[string]memEntry{}, fence: map[string]uint64{}, log: log}
}

var errDown = errors.New("node down")

func (m *memNode) Name() string { return m.name }
func (m *memNode) Close() error { return nil }

// ReleaseFair is Release: the waiters' queue is not modelled.
func (m *memNode) ReleaseFair(ctx context.Context, key, token, _ string) (bool, error) {
	return m.Release(ctx, key, token, true)
}

// live returns the entry at key if it has not expired; m.mu must be held.
func (m *memNode) live(key string) (memEntry, bool) {
	e, ok := m.keys[key]
	if ok && !m.clk.Now().Before(e.exp) {
		delete(m.keys, key)
		return memEntry{}, false
	}
	return e, ok
}

func (m *memNode) Acquire(_ context.Context, key, fenceKey, token string, ttl time.Duration) (node.Acquired, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return node.Acquired{}, errDown
	}
	f, has := m.fence[fenceKey]
	if _, held := m.live(key); held {
		return node.Acquired{Fence: f, HasFence: has}, nil
	}
	m.win++
	m.keys[key] = memEntry{val: token, exp: m.clk.Now().Add(ttl), window: m.win}
	return node.Acquired{OK: true, Fence: f, HasFence: has}, nil
}

func (m *memNode) Release(_ context.Context, key, token string, _ bool) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return false, errDown
	}
	if e, ok := m.live(key); ok && e.val == token {
		delete(m.keys, key)
		return true, nil
	}
	return false, nil
}

func (m *memNode) Extend(_ context.Context, key, token string, ttl time.Duration) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return false, errDown
	}
	if e, ok := m.live(key); ok && e.val == token {
		e.exp = m.clk.Now().Add(ttl)
		m.keys[key] = e
		return true, nil
	}
	return false, nil
}

func (m *memNode) WriteFence(_ context.Context, key, fenceKey, token string, f uint64) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return false, errDown
	}
	e, ok := m.live(key)
	if !ok || e.val != token {
		return false, nil
	}
	m.fence[fenceKey] = max(m.fence[fenceKey], f)
	m.log.mu.Lock()
	m.log.all = append(m.log.all, writeBack{node: m.name, window: e.window, owner: token, token: f})
	m.log.mu.Unlock()
	return true, nil
}

func (m *memNode) RaiseFence(_ context.Context, fenceKey string, f uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return errDown
	}
	m.fence[fenceKey] = max(m.fence[fenceKey], f)
	return nil
}

func (m *memNode) set(down bool) { m.mu.Lock(); m.down = down; m.mu.Unlock() }

func (m *memNode) wipe() {
	m.mu.Lock()
	m.keys = map[string]memEntry{}
	m.fence = map[string]uint64{}
	m.mu.Unlock()
}

type grant struct {
	owner string
	token uint64
}

// checkFences verifies the fencing claim over a history: distinct tokens for
// distinct grants, and for two grants whose write-backs share a node, the later
// lock window on that node has the larger token.
func checkFences(grants []grant, log *writeLog) error {
	byToken := map[uint64]string{}
	type at struct {
		node   string
		window int
	}
	windows := map[string][]at{} // owner -> where its write-backs landed
	for _, w := range log.all {
		windows[w.owner] = append(windows[w.owner], at{w.node, w.window})
	}
	for _, g := range grants {
		if other, dup := byToken[g.token]; dup && other != g.owner {
			return fmt.Errorf("token %d granted twice", g.token)
		}
		byToken[g.token] = g.owner
	}
	for i, a := range grants {
		for _, b := range grants[i+1:] {
			for _, wa := range windows[a.owner] {
				for _, wb := range windows[b.owner] {
					if wa.node != wb.node {
						continue
					}
					if (wa.window < wb.window) != (a.token < b.token) {
						return fmt.Errorf("on %s window %d (token %d) vs window %d (token %d): order differs",
							wa.node, wa.window, a.token, wb.window, b.token)
					}
				}
			}
		}
	}
	return nil
}

// runFenceSchedule drives clients through one random schedule. wipes allows a
// node to lose its data (at most one node without its counter at a time, all
// nodes answering: the documented condition for detecting a wiped node).
func runFenceSchedule(t *testing.T, seed uint64, n int, wipes bool) ([]grant, *writeLog) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	log := &writeLog{}
	nodes := make([]*memNode, n)
	ifaces := make([]node.Node, n)
	for i := range nodes {
		nodes[i] = newMemNode(fmt.Sprintf("n%d", i), clk, log)
		ifaces[i] = nodes[i]
	}
	const ttl = 100 * time.Millisecond
	c, err := redlock.New(ifaces, redlock.WithClock(clk), redlock.WithTTL(ttl), redlock.WithBreaker(0)) // no probe: Ping is not modelled
	require.NoError(t, err)
	defer c.Close()
	ctx := context.Background()
	holders := make([]*redlock.Lock, 3)
	var grants []grant
	wiped := -1
	for step := 0; step < 60; step++ {
		// Outages: only when wipes are off (a wiped node must be detectable).
		for _, nd := range nodes {
			nd.set(!wipes && rng.IntN(100) < 20)
		}
		who := rng.IntN(len(holders))
		switch op := rng.IntN(10); {
		case op < 4:
			if l, err := c.TryLock(ctx, "res"); err == nil {
				holders[who] = l
			}
		case op < 7:
			if l := holders[who]; l != nil {
				if tok, err := l.Fence(ctx); err == nil {
					grants = append(grants, grant{owner: l.Token(), token: tok})
				}
			}
		case op < 8:
			if l := holders[who]; l != nil {
				_ = l.Release(ctx)
				holders[who] = nil
			}
		case op < 9:
			clk.Advance(time.Duration(rng.IntN(150)) * time.Millisecond) // leases may run out
		default:
			if wipes {
				i := rng.IntN(n)
				if wiped < 0 || wiped == i {
					nodes[i].wipe()
					wiped = i
				}
			}
		}
		// A wiped node counts as restored once it holds a counter again.
		if wiped >= 0 {
			nodes[wiped].mu.Lock()
			_, has := nodes[wiped].fence["redlock:{res}:fence"]
			nodes[wiped].mu.Unlock()
			if has {
				wiped = -1
			}
		}
	}
	return grants, log
}

func TestFenceProperty(t *testing.T) {
	for _, tc := range []struct {
		name  string
		n     int
		wipes bool
	}{
		{"N=3 outages and expiries", 3, false},
		{"N=5 outages and expiries", 5, false},
		{"N=3 one wiped node at a time", 3, true},
		{"N=5 one wiped node at a time", 5, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seeds, fenced := 400, 0
			if testing.Short() {
				seeds = 50
			}
			for seed := uint64(1); seed <= uint64(seeds); seed++ {
				grants, log := runFenceSchedule(t, seed, tc.n, tc.wipes)
				fenced += len(grants)
				if err := checkFences(grants, log); err != nil {
					t.Fatalf("seed %d: %v (replay: go test -run 'TestFenceProperty/%s' with this seed)", seed, err, tc.name)
				}
			}
			require.Greater(t, fenced, seeds, "schedules must actually fence")
			t.Logf("%d schedules, %d fenced grants, no violation", seeds, fenced)
		})
	}
}

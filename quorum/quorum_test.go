package quorum_test

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/quorum"
)

// vote is a fake node's scripted answer. block makes the node hang until released.
type vote struct {
	ok    bool
	err   error
	block bool
}

var errBoom = errors.New("boom")

// fake runs scripted votes; blocked nodes wait on gate.
type fake struct {
	votes []vote
	gate  chan struct{}
}

func (f *fake) op(ctx context.Context, i int) (int, bool, error) {
	v := f.votes[i]
	if v.block {
		select {
		case <-f.gate:
		case <-ctx.Done():
			return 0, false, ctx.Err()
		}
	}
	return i * 10, v.ok, v.err
}

func TestMajority(t *testing.T) {
	for n, want := range map[int]int{1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 4} {
		assert.Equal(t, want, quorum.Majority(n), "n=%d", n)
	}
}

func TestOutcome(t *testing.T) {
	yes, no, fail, hang := vote{ok: true}, vote{}, vote{err: errBoom}, vote{ok: true, block: true}
	tests := []struct {
		name    string
		votes   []vote
		success bool
		yes     int
		no      int
		failed  int
	}{
		{"single node yes", []vote{yes}, true, 1, 0, 0},
		{"single node no", []vote{no}, false, 0, 1, 0},
		{"single node error", []vote{fail}, false, 0, 0, 1},
		{"all yes", []vote{yes, yes, yes}, true, -1, -1, 0},
		{"majority yes, one hangs", []vote{yes, hang, yes}, true, 2, 0, 0},
		{"majority no", []vote{no, yes, no}, false, -1, -1, 0},
		{"two fail, one hangs: decided without it", []vote{fail, hang, fail}, false, 0, 0, 2},
		{"five: two hang, three yes", []vote{hang, yes, hang, yes, yes}, true, 3, 0, 0},
		{"five: three no, two hang", []vote{no, hang, no, hang, no}, false, 0, 3, 0},
		{"five: mixed failure", []vote{yes, fail, no, yes, fail}, false, -1, -1, -1},
		{"error with ok is not a yes", []vote{{ok: true, err: errBoom}}, false, 0, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fake{votes: tt.votes, gate: make(chan struct{})}
			defer close(f.gate)
			c := quorum.Start(context.Background(), len(tt.votes), f.op, quorum.Options[int]{})
			o := c.Wait(context.Background())
			require.True(t, o.Decided)
			assert.Equal(t, tt.success, o.Success)
			assert.Equal(t, quorum.Majority(len(tt.votes)), o.Need)
			if tt.yes >= 0 {
				assert.Equal(t, tt.yes, o.Yes)
			}
			if tt.no >= 0 {
				assert.Equal(t, tt.no, o.No)
			}
			if tt.failed >= 0 {
				assert.Equal(t, tt.failed, o.Failed)
			}
			if o.Success {
				assert.GreaterOrEqual(t, o.Yes, o.Need)
			} else {
				pending := len(tt.votes) - o.Yes - o.No - o.Failed
				assert.Less(t, o.Yes+pending, o.Need, "failure decided only once a majority is out of reach")
			}
			for i, v := range tt.votes {
				if v.block {
					assert.False(t, o.Replies[i].Done, "hanging node %d cannot be in the outcome", i)
				}
				if o.Replies[i].Done {
					assert.Equal(t, i*10, o.Replies[i].Value)
				}
			}
		})
	}
}

func TestWaitStopsWithContext(t *testing.T) {
	f := &fake{votes: []vote{{ok: true}, {block: true}, {block: true}}, gate: make(chan struct{})}
	c := quorum.Start(context.Background(), 3, f.op, quorum.Options[int]{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	o := c.Wait(ctx)
	assert.False(t, o.Decided)
	assert.False(t, o.Success)
	close(f.gate)
	<-c.Settled()
	assert.Len(t, c.Replies(), 3)
	for _, r := range c.Replies() {
		assert.True(t, r.Done)
	}
}

func TestNeedOverride(t *testing.T) {
	f := &fake{votes: []vote{{ok: true}, {ok: true}, {}}, gate: make(chan struct{})}
	c := quorum.Start(context.Background(), 3, f.op, quorum.Options[int]{Need: 3})
	o := c.Wait(context.Background())
	assert.True(t, o.Decided)
	assert.False(t, o.Success)
}

// Abandon hands back nodes that already hold an effect and undoes stragglers that
// gain one afterwards; clean no votes are left alone.
func TestAbandonUndoesStragglers(t *testing.T) {
	f := &fake{
		votes: []vote{{ok: true}, {}, {err: errBoom}, {ok: true, block: true}, {block: true}},
		gate:  make(chan struct{}),
	}
	var mu sync.Mutex
	var undone []int
	var spawned, quick sync.WaitGroup
	quick.Add(3)
	c := quorum.Start(context.Background(), 5, f.op, quorum.Options[int]{
		Undo: func(i int, r quorum.Reply[int]) {
			mu.Lock()
			undone = append(undone, i)
			mu.Unlock()
		},
		OnReply: func(i int, r quorum.Reply[int]) {
			if i < 3 {
				quick.Done()
			}
		},
		Go: func(fn func()) {
			spawned.Add(1)
			go func() { defer spawned.Done(); fn() }()
		},
	})
	quick.Wait() // the three quick nodes have answered and been counted
	var now []int
	for i, r := range c.Abandon() {
		if r.Unsettled() {
			now = append(now, i)
		}
	}
	assert.ElementsMatch(t, []int{0, 2}, now, "yes and failed nodes are handed back")
	assert.Nil(t, c.Abandon(), "second Abandon hands back nothing")
	close(f.gate)
	<-c.Settled()
	spawned.Wait()
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []int{3}, undone, "only the straggler that said yes is undone")
}

func TestReplyPredicates(t *testing.T) {
	tests := []struct {
		r         quorum.Reply[int]
		yes, unst bool
	}{
		{quorum.Reply[int]{}, false, false},
		{quorum.Reply[int]{Done: true}, false, false},
		{quorum.Reply[int]{Done: true, OK: true}, true, true},
		{quorum.Reply[int]{Done: true, Err: errBoom}, false, true},
		{quorum.Reply[int]{OK: true}, false, false},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.yes, tt.r.Yes(), "%+v", tt.r)
		assert.Equal(t, tt.unst, tt.r.Unsettled(), "%+v", tt.r)
	}
}

// runner is fake as a quorum.Runner, recording its callbacks.
type runner struct {
	*fake
	mu      sync.Mutex
	replied []int
	undone  []int
	settled chan struct{}
}

func (r *runner) Run(ctx context.Context, i int) (int, bool, error) { return r.op(ctx, i) }

func (r *runner) OnReply(i int, _ quorum.Reply[int]) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.replied = append(r.replied, i)
}

func (r *runner) Settled() {
	if r.settled != nil {
		close(r.settled)
	}
}

func (r *runner) Undo(i int, _ quorum.Reply[int]) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.undone = append(r.undone, i)
}

// StartRunner decides as Start does, reports every reply, undoes the
// stragglers that land after AbandonDone, which names the nodes that had
// answered; Group counts the goroutines and Runner.Settled runs once all
// returned.
func TestStartRunnerAbandonDone(t *testing.T) {
	settled := make(chan struct{})
	r := &runner{fake: &fake{votes: []vote{{ok: true}, {ok: true}, {ok: true, block: true}}, gate: make(chan struct{})}, settled: settled}
	var wg sync.WaitGroup
	c := quorum.StartRunner(context.Background(), 3, r, quorum.Options[int]{Group: &wg})
	o := c.Wait(context.Background())
	require.True(t, o.Success)
	assert.Equal(t, 2, o.Yes)
	// Node 2 may not have answered when the outcome was decided; wait
	// until 0 and 1 are counted, then abandon.
	for {
		r.mu.Lock()
		n := len(r.replied)
		r.mu.Unlock()
		if n == 2 {
			break
		}
	}
	all := []int{0, 1, 2}
	assert.Equal(t, []int{0, 1}, c.AbandonDone(all))
	assert.Nil(t, c.AbandonDone(all), "abandoned already")
	close(r.gate)
	<-c.Settled()
	<-settled
	wg.Wait()
	assert.Equal(t, []int{2}, r.undone)
	assert.ElementsMatch(t, []int{0, 1, 2}, r.replied)
	assert.Equal(t, 3, len(c.Replies()))

	// Every node answered: AbandonDone returns all itself.
	c = quorum.StartRunner(context.Background(), 3, &runner{fake: &fake{votes: []vote{{ok: true}, {ok: true}, {}}}}, quorum.Options[int]{})
	<-c.Settled()
	assert.Equal(t, &all[0], &c.AbandonDone(all)[0])
}

// TestAnswered: Answered(i) closes with node i's reply, whether asked for
// before or after it; Unanswered counts the nodes still to answer.
func TestAnswered(t *testing.T) {
	f := &fake{votes: []vote{{ok: true}, {ok: true}, {block: true}}, gate: make(chan struct{})}
	c := quorum.Start(context.Background(), 3, f.op, quorum.Options[int]{})
	o := c.Wait(context.Background())
	require.True(t, o.Success)
	<-c.Answered(0)
	<-c.Answered(1)
	late := c.Answered(2)
	select {
	case <-late:
		t.Fatal("node 2 has not answered")
	default:
	}
	require.Equal(t, 1, c.Unanswered())
	require.Equal(t, late, c.Answered(2), "one channel a node")
	close(f.gate)
	<-late
	<-c.Settled()
	require.Equal(t, 0, c.Unanswered())
	<-c.Answered(2)
}

// TestInline: with Options.Inline a lone node's operation runs on the
// caller's goroutine (StartRunner returns with the Call decided, settled and
// its reply reported, the Group back to zero); with more nodes, Inline is
// ignored and the operations run in goroutines of their own.
func TestInline(t *testing.T) {
	tests := []struct {
		name  string
		votes []vote
		yes   bool
	}{
		{"granted", []vote{{ok: true}}, true},
		{"refused", []vote{{}}, false},
		{"failed", []vote{{err: errBoom}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var caller, ran atomic.Int64
			caller.Store(goid())
			r := &runner{fake: &fake{votes: tt.votes}, settled: make(chan struct{})}
			var wg sync.WaitGroup
			c := quorum.StartRunner(context.Background(), 1, &inlineRunner{runner: r, ran: &ran}, quorum.Options[int]{Group: &wg, Inline: true})
			select {
			case <-c.Settled():
			default:
				t.Fatal("not settled when StartRunner returned")
			}
			assert.Equal(t, caller.Load(), ran.Load(), "ran on the caller's goroutine")
			assert.Equal(t, []int{0}, r.replied)
			o := c.Wait(context.Background())
			assert.True(t, o.Decided)
			assert.Equal(t, tt.yes, o.Success)
			wg.Wait() // back to zero already: returns at once
		})
	}
	t.Run("three nodes: not inline", func(t *testing.T) {
		var ran atomic.Int64
		caller := goid()
		r := &runner{fake: &fake{votes: []vote{{ok: true}, {ok: true}, {ok: true}}}}
		c := quorum.StartRunner(context.Background(), 3, &inlineRunner{runner: r, ran: &ran}, quorum.Options[int]{Inline: true})
		<-c.Settled()
		assert.NotEqual(t, caller, ran.Load())
	})
}

// inlineRunner records the goroutine its operations ran on.
type inlineRunner struct {
	*runner
	ran *atomic.Int64
}

func (r *inlineRunner) Run(ctx context.Context, i int) (int, bool, error) {
	r.ran.Store(goid())
	return r.runner.Run(ctx, i)
}

// goid returns the calling goroutine's id, from its stack trace's header.
func goid() int64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	id, _ := strconv.ParseInt(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	return id
}

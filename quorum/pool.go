package quorum

import (
	"context"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"
)

// Pool runs the nodes' operations of Calls on goroutines that outlive them:
// a goroutine that finished one waits, for a while, for the next, instead of
// exiting. A new goroutine starts with a small stack, and a node's call
// (script, connection, system call) grows it by copying, two or three times
// on every call: 7 % of the CPU of a sequential Lock+Release at N=3 went to
// runtime.copystack (issue 26). A waiting goroutine keeps its stack until a
// garbage collection finds it mostly unused and shrinks it. The price: after
// a burst of concurrent operations, as many goroutines and their stacks stay
// alive for the idle time. Each operation runs with the pprof labels of its
// Call's context.
//
// Each waiting goroutine has a channel of its own, and the last to finish is
// handed the next operation (its stack the warmest): no channel shared by
// all goroutines, and no timer in their wait (a first version with both
// spent 8 % of the CPU of 32 goroutines' Lock+Release at N=3 in its select
// and hand-over); a sweep every idle time ends those that waited through the
// whole time before it.
//
// The zero value is not usable: NewPool. Close ends the waiting goroutines;
// operations handed over before it still run, and later ones start
// goroutines of their own.
type Pool struct {
	mu      sync.Mutex
	idle    []*worker // waiting goroutines, the last to finish last
	closed  bool
	gen     uint64 // sweeps so far
	sweep   *time.Timer
	idleFor time.Duration

	// The tests' window on the goroutines: how many were started and have
	// exited.
	started, exited atomic.Int64
}

// worker is a goroutine of the pool.
type worker struct {
	tasks chan task // capacity 1; a task with a nil r tells it to exit
	gen   uint64    // p.gen when it started waiting
}

// task is one node's operation of a Call.
type task struct {
	r nodeRunner
	i int
}

// nodeRunner runs node i's operation of a Call.
type nodeRunner interface{ runNode(i int) }

// NewPool returns a Pool whose goroutines exit once they waited idle for
// between idle and twice idle (at least a millisecond).
func NewPool(idle time.Duration) *Pool { return &Pool{idleFor: max(idle, time.Millisecond)} }

// Close makes the waiting goroutines exit, now and once their operation is
// done. Idempotent.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	for _, w := range p.idle {
		w.tasks <- task{}
	}
	clear(p.idle)
	p.idle = p.idle[:0]
	if p.sweep != nil {
		p.sweep.Stop()
	}
}

// run hands t to the goroutine that last finished one, or starts one.
func (p *Pool) run(t task) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		w := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		w.tasks <- t
		return
	}
	p.mu.Unlock()
	p.started.Add(1)
	go p.work(&worker{tasks: make(chan task, 1)}, t)
}

// work runs t, then the operations handed to it, until the pool is closed
// or a sweep finds it idle since before the previous one.
func (p *Pool) work(w *worker, t task) {
	defer p.exited.Add(1)
	for {
		t.r.runNode(t.i)
		pprof.SetGoroutineLabels(context.Background()) // not the last caller's while idle
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return
		}
		w.gen = p.gen
		p.idle = append(p.idle, w)
		if p.sweep == nil {
			p.sweep = time.AfterFunc(p.idleFor, p.sweepIdle)
		}
		p.mu.Unlock()
		t = <-w.tasks
		if t.r == nil {
			return
		}
	}
}

// sweepIdle ends the goroutines that waited since before the last sweep.
func (p *Pool) sweepIdle() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.gen++
	keep := p.idle[:0]
	for _, w := range p.idle {
		if w.gen+1 < p.gen {
			w.tasks <- task{}
			continue
		}
		keep = append(keep, w)
	}
	clear(p.idle[len(keep):])
	p.idle = keep
	if len(p.idle) > 0 {
		p.sweep.Reset(p.idleFor)
	} else {
		p.sweep = nil
	}
}

// idleWaiting reports whether a goroutine waits for an operation (tests).
func (p *Pool) idleWaiting() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle) > 0
}

// live returns how many of the pool's goroutines have not exited (tests).
func (p *Pool) live() int64 { return p.started.Load() - p.exited.Load() }

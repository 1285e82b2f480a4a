package quorum

import (
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
// garbage collection finds it mostly unused and shrinks it. Handing a
// waiting goroutine its operation costs what starting one does (it is made
// runnable on the caller's processor). The price: after a burst of
// concurrent operations, as many goroutines and their stacks stay alive for
// the idle time. Each operation runs with the pprof labels of its Call's
// context.
//
// The zero value is not usable: NewPool. Close ends the waiting goroutines;
// operations handed over before it still run.
type Pool struct {
	tasks chan task
	stop  chan struct{}
	once  sync.Once
	idle  time.Duration
	// The tests' window on the goroutines: how many were started, have
	// exited, and are waiting for an operation.
	started, exited, waiting atomic.Int64
}

// task is one node's operation of a Call.
type task struct {
	r nodeRunner
	i int
}

// nodeRunner runs node i's operation of a Call.
type nodeRunner interface{ runNode(i int) }

// NewPool returns a Pool whose goroutines wait idle for at most idle before
// they exit.
func NewPool(idle time.Duration) *Pool {
	return &Pool{tasks: make(chan task), stop: make(chan struct{}), idle: idle}
}

// Close makes the waiting goroutines exit, now and once their operation is
// done; Calls started later start goroutines of their own. Idempotent.
func (p *Pool) Close() { p.once.Do(func() { close(p.stop) }) }

// run hands t to a waiting goroutine, or starts one.
func (p *Pool) run(t task) {
	select {
	case p.tasks <- t:
	default:
		p.started.Add(1)
		go p.work(t)
	}
}

// work runs t, then the operations handed to it, until it waited idle for
// p.idle or the pool is closed.
func (p *Pool) work(t task) {
	defer p.exited.Add(1)
	var timer *time.Timer
	for {
		t.r.runNode(t.i)
		t = task{}
		select {
		case <-p.stop:
			return
		default:
		}
		if timer == nil {
			timer = time.NewTimer(p.idle)
		} else {
			timer.Reset(p.idle)
		}
		p.waiting.Add(1)
		select {
		case t = <-p.tasks:
			p.waiting.Add(-1)
		case <-timer.C:
			p.waiting.Add(-1)
			return
		case <-p.stop:
			p.waiting.Add(-1)
			timer.Stop()
			return
		}
	}
}

// idleWaiting reports whether a goroutine waits for an operation (tests).
func (p *Pool) idleWaiting() bool { return p.waiting.Load() > 0 }

// live returns how many of the pool's goroutines have not exited (tests).
func (p *Pool) live() int64 { return p.started.Load() - p.exited.Load() }

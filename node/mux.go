package node

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
)

// errMuxClosed is returned for commands on a closed node.
var errMuxClosed = errors.New("node: closed")

// mux pipelines the commands of many goroutines over a few connections: each
// connection has a writer that sends whatever commands are waiting in one write,
// and a reader that matches replies to commands in order. This replaces one
// connection (and one write and one read system call) per command in flight,
// which is what bounds throughput when many goroutines lock at once.
//
// A lone command (the connection idle: nothing waits to be written, no reply
// is outstanding) whose context can end only at its deadline skips both
// goroutines: the caller writes it and waits for the reply's first bytes
// itself (lone), two goroutine hand-overs fewer per command, which is most of
// the cost of an uncontended Lock+Release on loopback besides the round trips
// (issue 26: single node).
//
// A command whose caller gives up (its context ends) stays in the pipeline; its
// reply is dropped when it comes. Commands on one connection run in the order they
// were sent, and every script on one lock key takes the same connection
// (slotOf), so a release sent after a timed-out acquisition runs after it on
// the server. A caller that gives up while its connection is dialed has its
// command sent all the same once it is (detach), unless it can grant a lock.
type mux struct {
	dial        func(context.Context) (redis.Conn, error)
	dialTimeout time.Duration // bounds each dial, whoever waits for it
	health      time.Duration // a reply later than this breaks the connection
	next        atomic.Uint32
	slots       []muxSlot
	closed      atomic.Bool
	ctx         context.Context // ends on close: cuts dials short
	cancel      context.CancelFunc
	dials       sync.WaitGroup // dials in progress
	detached    sync.WaitGroup // detach's goroutines
}

// muxSlot holds one connection. Its mutex is only held for short bookkeeping,
// never across a dial: callers wait for a dial on its channel and their own
// context.
type muxSlot struct {
	mu      sync.Mutex
	conn    *muxConn
	dialing *dialCall // non-nil while a dial for this slot runs
}

// dialCall is one dial, shared by every caller that needs the slot meanwhile.
type dialCall struct {
	done chan struct{} // closed when mc or err is set
	mc   *muxConn
	err  error
}

type muxReq struct {
	cmd   string
	args  []any
	reply chan muxResult // buffered: the reader never blocks on an absent caller
	buf   [8]any         // args, when they fit: the caller's slice is not kept
}

type muxResult struct {
	v   any
	err error
}

type muxConn struct {
	c       redis.Conn
	send    chan *muxReq
	pending chan *muxReq
	done    chan struct{} // closed when the connection failed or was closed
	// inflight counts commands sent (or being sent) whose reply has not been read.
	inflight atomic.Int64
	// wmu is held while commands are written (c.Send, pending, c.Flush):
	// by the writer, or by a caller sending a lone command.
	wmu sync.Mutex
	// queued counts the commands handed to the writer (send) and not yet
	// written: while there are any, a lone command would overtake them.
	queued atomic.Int64
	// aw waits for a reply's first bytes (replyAwaiter); nil when the
	// connection cannot (then no command is lone).
	aw replyAwaiter
	// imu guards waiting: a lone command's wait that its watch may cut
	// short (stop).
	imu     sync.Mutex
	waiting bool
	wgen    uint64 // the wait's generation: a late stop of an earlier one does nothing
	once    sync.Once
	err     error
}

func newMux(conns int, dialTimeout, health time.Duration, dial func(context.Context) (redis.Conn, error)) *mux {
	ctx, cancel := context.WithCancel(context.Background())
	return &mux{dial: dial, dialTimeout: dialTimeout, health: health, slots: make([]muxSlot, conns), ctx: ctx, cancel: cancel}
}

// do sends one command and waits for its reply, or for ctx, or for
// mode.watch (the command is sent all the same). With mode.lone, ctx ends
// only at its deadline (DeadlineBound): the command may be lone.
func (m *mux) do(ctx context.Context, mode callMode, cmd string, args ...any) (any, error) {
	if m.closed.Load() {
		return nil, errMuxClosed
	}
	watchDone := doneOf(mode.watch)
	slot := m.slotOf(cmd, args)
	mc, err := m.conn(ctx, mode.watch, slot)
	if err == errWatchEnded {
		return nil, m.detach(ctx, mode.watch, cmd, args)
	}
	if err != nil {
		return nil, err
	}
	req := newMuxReq(cmd, args)
	if mode.lone {
		if dl, ok := ctx.Deadline(); ok {
			if v, err, sent := mc.lone(dl, mode.watch, req); sent {
				return v, err
			}
		}
	}
	mc.queued.Add(1)
	select {
	case mc.send <- req:
	case <-mc.done:
		mc.queued.Add(-1)
		req.free() // never sent: nobody else has it
		return nil, mc.err
	case <-ctx.Done():
		mc.queued.Add(-1)
		req.free()
		return nil, ctx.Err()
	}
	select {
	case r := <-req.reply:
		req.free()
		return r.v, r.err
	case <-mc.done: // the connection died: its error, unless the reply came first
		select {
		case r := <-req.reply:
			req.free()
			return r.v, r.err
		default:
			return nil, mc.err // its reply may still come: not reused
		}
	case <-ctx.Done():
		return nil, ctx.Err() // its reply comes later: not reused
	case <-watchDone:
		return nil, mode.watch.Err() // the same
	}
}

// lone sends one command and reads its reply on the caller's goroutine, if
// the connection is idle: nothing waits for the writer (the command would
// overtake it) and no reply is outstanding, so that the server has read
// everything sent before and the write cannot block on a full socket buffer
// (a paused server), and the reader is not reading. sent is false when the
// connection is busy (nothing was done: the writer takes the command, with
// the others, in one write). The wait for the reply ends at deadline, or
// when watch (if not nil) ends: the reader then takes the reply over and
// drops it, as it does for a caller that gave up, and the connection goes on
// (no byte of the reply was read). The rest of a reply whose first bytes came
// is read by the deadline too.
func (mc *muxConn) lone(deadline time.Time, watch context.Context, req *muxReq) (v any, err error, sent bool) {
	if mc.aw == nil || mc.inflight.Load() != 0 || mc.queued.Load() != 0 || !mc.wmu.TryLock() {
		return nil, nil, false
	}
	defer mc.wmu.Unlock()
	if mc.inflight.Load() != 0 || mc.queued.Load() != 0 {
		return nil, nil, false
	}
	select {
	case <-mc.done:
		return nil, nil, false // the writer's path reports the failure
	default:
	}
	// req's copy of the arguments is sent, not the caller's (they would
	// escape to the heap through the connection's interface).
	refused, err := mc.sendOne(req)
	if refused != nil {
		req.free()
		return nil, refused, true // nothing sent: this command only
	}
	if err != nil {
		req.free()
		return nil, err, true
	}
	if !mc.flush() {
		req.free()
		return nil, mc.err, true
	}
	if !mc.wait(deadline, watch) {
		// Sent, not answered in time: pending for the reader, which
		// drops the reply (req is never recycled).
		select {
		case mc.pending <- req: // empty: nothing was in flight
		case <-mc.done:
		}
		if watch != nil && watch.Err() != nil {
			return nil, watch.Err(), true
		}
		return nil, context.DeadlineExceeded, true
	}
	req.free()
	if watch != nil {
		if wd, ok := watch.Deadline(); ok && wd.Before(deadline) {
			deadline = wd
		}
	}
	v, err = mc.receiveBy(deadline)
	mc.inflight.Add(-1)
	if err != nil {
		if _, ok := err.(redis.Error); !ok { // a broken connection
			mc.fail(fmt.Errorf("node: receive: %w", err))
			return nil, mc.err, true
		}
	}
	return v, err, true
}

// loneSpin is how long a lone command's caller waits for its reply before
// it watches its context (context.AfterFunc: allocations that a reply on
// loopback, a tenth of this, never costs).
const loneSpin = 2 * time.Millisecond

// wait waits for the first bytes of a lone command's reply until deadline,
// or until watch (if not nil) ends, and reports whether they came. mc.wmu
// must be held.
func (mc *muxConn) wait(deadline time.Time, watch context.Context) bool {
	if watch == nil {
		mc.aw.setWait(deadline)
		return mc.aw.awaitReply()
	}
	first := time.Now().Add(loneSpin)
	if deadline.Before(first) {
		first = deadline
	}
	if wd, ok := watch.Deadline(); ok && wd.Before(first) {
		first = wd
	}
	mc.aw.setWait(first)
	if mc.aw.awaitReply() {
		return true
	}
	if watch.Err() != nil || !time.Now().Before(deadline) {
		return false
	}
	// A slow reply: from now on the watch's end stops the wait (stop,
	// from its own goroutine, moves the read deadline to the past).
	mc.imu.Lock()
	mc.aw.setWait(deadline)
	mc.waiting = true
	mc.wgen++
	gen := mc.wgen
	mc.imu.Unlock()
	unwatch := context.AfterFunc(watch, func() { mc.stop(gen) })
	got := false
	if watch.Err() == nil {
		got = mc.aw.awaitReply()
	}
	unwatch()
	mc.imu.Lock()
	mc.waiting = false
	mc.imu.Unlock()
	return got
}

// stop cuts wait number gen short (its watch ended), if it still waits.
func (mc *muxConn) stop(gen uint64) {
	mc.imu.Lock()
	defer mc.imu.Unlock()
	if mc.waiting && mc.wgen == gen {
		mc.aw.setWait(time.Unix(1, 0))
	}
}

// receiveBy reads the reply whose first bytes arrived, by deadline (at
// least a millisecond from now): the rest of a reply that stalls fails the
// connection then, instead of holding the caller for the health timeout. A
// reply the parser cannot take fails the connection, as in the reader.
func (mc *muxConn) receiveBy(deadline time.Time) (v any, err error) {
	defer func() {
		if p := recover(); p != nil {
			mc.fail(fmt.Errorf("node: receive: reading a reply panicked: %v (%w)", p, ErrMalformedReply))
			v, err = nil, mc.err
		}
	}()
	return redis.ReceiveWithTimeout(mc.c, max(time.Until(deadline), time.Millisecond))
}

// flush sends what was written; a failure fails the connection (the reader
// then fails every command pending). mc.wmu must be held.
func (mc *muxConn) flush() bool {
	if err := mc.c.Flush(); err != nil {
		mc.fail(fmt.Errorf("node: flush: %w", err))
		return false
	}
	return true
}

// detach sends, from a goroutine of its own, a command whose caller stopped
// waiting (watch ended) while its connection was dialed, and drops the
// reply: a release is sent as promised, whatever its caller does. A script
// that can grant a lock is not sent: it could only be undone. It returns
// watch's error.
func (m *mux) detach(ctx context.Context, watch context.Context, cmd string, args []any) error {
	if grantScript(cmd, args) || m.closed.Load() || len(args) == 0 {
		return watch.Err()
	}
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(m.dialTimeout)
	}
	args = slices.Clone(args) // the caller's may be on its stack
	if h, ok := args[0].(string); ok && cmd == "EVALSHA" && scripts.byHash[h] != nil {
		// Its reply is not read: a NOSCRIPT could not be answered with
		// EVAL. The source, at once.
		cmd, args[0] = "EVAL", scripts.byHash[h].src
	}
	m.detached.Add(1)
	go func() {
		defer m.detached.Done()
		// ctx may end once its caller returns (a round settles): a
		// context of its own, with the same deadline.
		dctx, cancel := context.WithDeadline(m.ctx, dl)
		defer cancel()
		_, _ = m.do(dctx, callMode{}, cmd, args...) // the same slot: slotOf
	}()
	return watch.Err()
}

// doneOf is ctx's Done channel, nil (never ready) when ctx is nil.
func doneOf(ctx context.Context) <-chan struct{} {
	if ctx == nil {
		return nil
	}
	return ctx.Done()
}

// muxReqs recycles requests (and their reply channels), two allocations per
// command otherwise. A request goes back only once its caller has received
// its one reply (or it was never handed to the connection): the writer is
// done with it by then (a reply comes only after the write that sent it),
// and nothing else sends on its channel. A request given up while in flight
// is left to the garbage collector.
var muxReqs = sync.Pool{New: func() any { return &muxReq{reply: make(chan muxResult, 1)} }}

// newMuxReq returns a request for cmd with a copy of args (the caller's
// slice may be on its stack).
func newMuxReq(cmd string, args []any) *muxReq {
	req := muxReqs.Get().(*muxReq)
	req.cmd, req.args = cmd, append(req.buf[:0], args...)
	return req
}

// free recycles req; its reply channel is empty.
func (req *muxReq) free() {
	clear(req.buf[:])
	req.cmd, req.args = "", nil
	muxReqs.Put(req)
}

// conn returns a live connection of the next slot. Without one, it starts a
// dial (one per slot at a time, bounded by the dial timeout and by close) and
// waits for it or for ctx, whichever ends first.
func (m *mux) conn(ctx context.Context, watch context.Context, slot uint32) (*muxConn, error) {
	s := &m.slots[slot]
	s.mu.Lock()
	if mc := s.conn; mc != nil {
		select {
		case <-mc.done:
			s.conn = nil
		default:
			s.mu.Unlock()
			return mc, nil
		}
	}
	if m.closed.Load() {
		s.mu.Unlock()
		return nil, errMuxClosed
	}
	call := s.dialing
	if call == nil {
		call = &dialCall{done: make(chan struct{})}
		s.dialing = call
		m.dials.Add(1)
		go m.dialSlot(s, call)
	}
	s.mu.Unlock()
	select {
	case <-call.done:
		return call.mc, call.err
	case <-ctx.Done():
		return nil, fmt.Errorf("node: waiting for a connection: %w", ctx.Err())
	case <-doneOf(watch):
		return nil, errWatchEnded
	}
}

// errWatchEnded: a command's watch ended while its connection was dialed.
var errWatchEnded = errors.New("node: the caller stopped waiting for a connection")

// slotOf returns the slot of a command: a script's by its first key, so that
// every command on one lock key takes one connection and runs in the order
// it was sent (an acquisition's undo never overtakes it: a connection's
// commands are written and run in order), others in turn.
func (m *mux) slotOf(cmd string, args []any) uint32 {
	n := uint32(len(m.slots))
	if n == 1 {
		return 0
	}
	if len(args) > 2 && (cmd == "EVALSHA" || cmd == "EVAL") {
		if k, ok := args[2].(string); ok {
			h := uint32(2166136261) // FNV-1a
			for i := 0; i < len(k); i++ {
				h = (h ^ uint32(k[i])) * 16777619
			}
			return h % n
		}
	}
	return m.next.Add(1) % n
}

// dialSlot dials for slot s and hands the outcome to call's waiters.
func (m *mux) dialSlot(s *muxSlot, call *dialCall) {
	defer m.dials.Done()
	ctx, cancel := context.WithTimeout(m.ctx, m.dialTimeout)
	c, err := m.dial(ctx)
	cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dialing = nil
	switch {
	case err != nil:
		call.err = err
	case m.closed.Load():
		c.Close()
		call.err = errMuxClosed
	default:
		mc := &muxConn{c: c, send: make(chan *muxReq, 256), pending: make(chan *muxReq, 4096), done: make(chan struct{})}
		if a, ok := c.(replyAwaiter); ok {
			mc.aw = a
		}
		go mc.write()
		go mc.read(m.health)
		s.conn, call.mc = mc, mc
	}
	close(call.done)
}

// fail closes the connection once, recording why.
func (mc *muxConn) fail(err error) {
	mc.once.Do(func() {
		mc.err = err
		close(mc.done)
		mc.c.Close()
	})
}

func (mc *muxConn) write() {
	for {
		var req *muxReq
		select {
		case req = <-mc.send:
		case <-mc.done:
			return
		}
		// Send this command and every one already waiting, then flush once.
		mc.wmu.Lock()
		yielded := false
		for req != nil {
			ok := mc.enqueue(req)
			mc.queued.Add(-1)
			if !ok {
				mc.wmu.Unlock()
				return
			}
			select {
			case req = <-mc.send:
			default:
				req = nil
				if !yielded && mc.inflight.Load() > 1 {
					// Other commands are in flight, so callers are busy: let the
					// ones about to send join this write (one system call for many
					// commands is the point). A lone command is flushed at once.
					yielded = true
					runtime.Gosched()
					select {
					case req = <-mc.send:
					default:
					}
				}
			}
		}
		ok := mc.flush()
		mc.wmu.Unlock()
		if !ok {
			return
		}
	}
}

// refuser is a connection that refuses some commands before sending them (a
// quarantined node refusing acquisitions: restart.go).
type refuser interface {
	check(cmd string, args []any) error
}

// sendOne sends req into the write buffer, once the connection has not
// refused it: the one place where a command is sent, by the writer or as a
// lone command, so that a quarantined connection refuses every grant
// script whichever way it goes (refused: nothing sent, the connection goes
// on). err is the connection's failure. mc.wmu must be held.
func (mc *muxConn) sendOne(req *muxReq) (refused, err error) {
	if r, ok := mc.c.(refuser); ok {
		if err := r.check(req.cmd, req.args); err != nil {
			return err, nil
		}
	}
	mc.inflight.Add(1)
	if err := mc.c.Send(req.cmd, req.args...); err != nil {
		mc.fail(fmt.Errorf("node: send: %w", err))
		return nil, mc.err
	}
	return nil, nil
}

// enqueue sends one command into the write buffer, to be matched with its reply
// by the reader. A command the connection refuses gets the refusal, and the
// connection goes on. It returns false when the connection failed.
func (mc *muxConn) enqueue(req *muxReq) bool {
	// Send before req is pending: once pending, req may get its reply (a
	// failure, when the reader stops) and be recycled, args included. The
	// writer is the only sender, so pending keeps the order of the sends, and
	// the reader reads a reply only for a pending request.
	refused, err := mc.sendOne(req)
	if refused != nil {
		req.reply <- muxResult{err: refused} // nothing sent: this command only
		return true
	}
	if err != nil {
		req.reply <- muxResult{err: err}
		return false
	}
	select {
	case mc.pending <- req:
	case <-mc.done:
		req.reply <- muxResult{err: mc.err}
		return false
	}
	return true
}

func (mc *muxConn) read(health time.Duration) {
	var cur *muxReq // the command whose reply is being read
	defer func() {
		if p := recover(); p != nil { // a reply the parser could not take
			mc.fail(fmt.Errorf("node: receive: reading a reply panicked: %v (%w)", p, ErrMalformedReply))
			if cur != nil {
				cur.reply <- muxResult{err: mc.err}
			}
		}
		// Fail whatever is still waiting.
		for {
			select {
			case req := <-mc.pending:
				req.reply <- muxResult{err: mc.err}
			default:
				return
			}
		}
	}()
	for {
		var req *muxReq
		select {
		case req = <-mc.pending:
		case <-mc.done:
			return
		}
		cur = req
		v, err := redis.ReceiveWithTimeout(mc.c, health)
		cur = nil
		mc.inflight.Add(-1)
		if err != nil {
			if _, ok := err.(redis.Error); !ok { // a broken or hung connection
				mc.fail(fmt.Errorf("node: receive: %w", err))
				req.reply <- muxResult{err: mc.err}
				return
			}
		}
		req.reply <- muxResult{v: v, err: err}
	}
}

// close fails every connection, cuts dials short, refuses new commands, and
// waits for the dials to end.
func (m *mux) close() {
	m.closed.Store(true)
	m.cancel()
	for i := range m.slots {
		s := &m.slots[i]
		s.mu.Lock()
		if s.conn != nil {
			s.conn.fail(errMuxClosed)
			s.conn = nil
		}
		s.mu.Unlock()
	}
	m.dials.Wait()
	m.detached.Wait()
}

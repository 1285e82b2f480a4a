package node

import (
	"context"
	"errors"
	"fmt"
	"runtime"
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
// A command whose caller gives up (its context ends) stays in the pipeline; its
// reply is dropped when it comes. Commands on one connection run in the order they
// were sent, so a release sent after a timed-out acquisition on the same
// connection runs after it on the server.
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
	once     sync.Once
	err      error
}

func newMux(conns int, dialTimeout, health time.Duration, dial func(context.Context) (redis.Conn, error)) *mux {
	ctx, cancel := context.WithCancel(context.Background())
	return &mux{dial: dial, dialTimeout: dialTimeout, health: health, slots: make([]muxSlot, conns), ctx: ctx, cancel: cancel}
}

// do sends one command and waits for its reply, or for ctx.
func (m *mux) do(ctx context.Context, cmd string, args ...any) (any, error) {
	if m.closed.Load() {
		return nil, errMuxClosed
	}
	mc, err := m.conn(ctx)
	if err != nil {
		return nil, err
	}
	req := newMuxReq(cmd, args)
	select {
	case mc.send <- req:
	case <-mc.done:
		req.free() // never sent: nobody else has it
		return nil, mc.err
	case <-ctx.Done():
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
	}
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
func (m *mux) conn(ctx context.Context) (*muxConn, error) {
	s := &m.slots[m.next.Add(1)%uint32(len(m.slots))]
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
	}
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
		yielded := false
		for req != nil {
			if !mc.enqueue(req) {
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
		if err := mc.c.Flush(); err != nil {
			mc.fail(fmt.Errorf("node: flush: %w", err))
			return
		}
	}
}

// refuser is a connection that refuses some commands before sending them (a
// quarantined node refusing acquisitions: restart.go).
type refuser interface {
	check(cmd string, args []any) error
}

// enqueue sends one command into the write buffer, to be matched with its reply
// by the reader. A command the connection refuses gets the refusal, and the
// connection goes on. It returns false when the connection failed.
func (mc *muxConn) enqueue(req *muxReq) bool {
	if r, ok := mc.c.(refuser); ok {
		if err := r.check(req.cmd, req.args); err != nil {
			req.reply <- muxResult{err: err} // nothing sent: this command only
			return true
		}
	}
	mc.inflight.Add(1)
	// Send before req is pending: once pending, req may get its reply (a
	// failure, when the reader stops) and be recycled, args included. The
	// writer is the only sender, so pending keeps the order of the sends, and
	// the reader reads a reply only for a pending request.
	if err := mc.c.Send(req.cmd, req.args...); err != nil {
		mc.fail(fmt.Errorf("node: send: %w", err))
		req.reply <- muxResult{err: mc.err}
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
}

package sim

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// LinkFaults describes the network between one client and one node. Every
// message (a request, or the reply to it) draws its fate from the link's own
// seeded random stream, in the order the client sends them.
type LinkFaults struct {
	// MinDelay and MaxDelay bound the usual one-way delay (uniform).
	MinDelay, MaxDelay time.Duration
	// SlowProb is the probability that a message is slow instead, with a delay
	// uniform in [MaxDelay, SlowMax] (which may exceed the node timeout: the
	// reply then arrives after the client gave up, a "late" reply).
	SlowProb float64
	SlowMax  time.Duration
	// ReqLoss and ReplyLoss are the probabilities that a request never
	// reaches the node (the command does not run), or that its reply never
	// reaches the client (the command ran; the client times out).
	ReqLoss, ReplyLoss float64
	// Partitions are intervals (since the start of the run) during which every
	// message on the link is lost and dials hang until the caller gives up.
	Partitions []Interval
	// Slow forces the delay of requests sent during an interval (scripted
	// scenarios).
	Slow []SlowWindow
}

// SlowWindow delays every request sent during Interval by Delay.
type SlowWindow struct {
	Interval
	Delay time.Duration
}

// Interval is [From, To) measured from the start of the run.
type Interval struct{ From, To time.Duration }

func (iv Interval) contains(d time.Duration) bool { return iv.From <= d && d < iv.To }

// fate is what happens to one request and its reply.
type fate struct {
	seq        int
	reqDelay   time.Duration
	replyDelay time.Duration
	reqLost    bool
	replyLost  bool
}

// link is the network path from one client to one node.
type link struct {
	w      *World
	client int
	node   *Node

	mu     sync.Mutex
	faults LinkFaults
	seed   uint64
	seq    int
	connID int
	last   time.Duration // instant of the last message
	burst  uint64        // messages sent at that instant before this one
}

func (l *link) name() string { return l.w.names[l.client] + "→" + l.node.name }

// partitioned reports whether the link is cut at d (time since start).
func (l *link) partitioned(d time.Duration) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.faults.Partitions {
		if p.contains(d) {
			return true
		}
	}
	return false
}

// addPartition cuts the link during iv (used by scripted scenarios).
func (l *link) addPartition(iv Interval) {
	l.mu.Lock()
	l.faults.Partitions = append(l.faults.Partitions, iv)
	l.mu.Unlock()
}

func (l *link) delay(rng *rand.Rand) time.Duration {
	f := l.faults
	if f.SlowProb > 0 && rng.Float64() < f.SlowProb && f.SlowMax > f.MaxDelay {
		return f.MaxDelay + time.Duration(rng.Int64N(int64(f.SlowMax-f.MaxDelay)))
	}
	d := f.MinDelay
	if f.MaxDelay > f.MinDelay {
		d += time.Duration(rng.Int64N(int64(f.MaxDelay - f.MinDelay)))
	}
	// A nanosecond-scale random offset: no two messages of a run land at the
	// same virtual instant, so the order of events never depends on the Go
	// scheduler.
	return d + time.Duration(1+rng.IntN(997))
}

// next draws the fate of the next request on this link. The fate is a
// function of the seed, the link and the virtual instant the request is sent
// (and, for requests sent at the very same instant, their rank), not of how
// many requests came before: a rare tie between two requests at one instant,
// whose order the Go scheduler picks, cannot shift the fates of all later
// messages.
func (l *link) next() fate {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.w.since()
	if now == l.last {
		l.burst++
	} else {
		l.last, l.burst = now, 0
	}
	rng := rand.New(rand.NewPCG(l.seed, uint64(now)<<4|l.burst&15))
	l.seq++
	f := fate{seq: l.seq}
	f.reqDelay = l.delay(rng)
	f.replyDelay = l.delay(rng)
	f.reqLost = l.faults.ReqLoss > 0 && rng.Float64() < l.faults.ReqLoss
	f.replyLost = l.faults.ReplyLoss > 0 && rng.Float64() < l.faults.ReplyLoss
	for _, sw := range l.faults.Slow {
		if sw.contains(now) {
			f.reqDelay = sw.Delay
		}
	}
	return f
}

// dial opens a connection from the client to the node, through the link.
func (l *link) dial(ctx context.Context) (net.Conn, error) {
	w := l.w
	if l.partitioned(w.since()) {
		// A SYN into a partition: nothing comes back until the caller gives up.
		w.record("net", l.name()+" dial: no route (partitioned), waits for the caller's deadline")
		select {
		case <-ctx.Done():
			return nil, &net.OpError{Op: "dial", Net: "sim", Err: ctx.Err()}
		case <-w.done:
			return nil, net.ErrClosed
		}
	}
	pipe, err := l.node.accept()
	if err != nil {
		w.record("net", l.name()+" dial: "+err.Error())
		return nil, err
	}
	l.mu.Lock()
	l.connID++
	id := l.connID
	l.mu.Unlock()
	c := &conn{
		l: l, id: id, pipe: pipe,
		out:     make(chan outMsg, 16),
		in:      make(chan []byte),
		inReady: make(chan struct{}, 1),
		closed:  make(chan struct{}),
		dead:    make(chan struct{}),
	}
	if !l.node.track(c) {
		pipe.Close()
		return nil, &net.OpError{Op: "dial", Net: "sim", Err: syscall.ECONNREFUSED}
	}
	go c.sender()
	go c.receiver()
	return c, nil
}

func (l *link) actor() string { return l.w.names[l.client] }

// conn is a client's connection to a node: a net.Conn over miniredis' in-memory
// pipe, with delays, loss and resets injected. Writes return at once (the
// bytes are "on the wire"); a sender goroutine delivers them to the node after
// the request's delay, and a receiver goroutine hands the node's reply to
// Read after the reply's delay. Deadlines are honoured on the bubble's clock.
//
// When the client closes the connection (redigo does after a timeout),
// requests already on the wire still reach the node and run, as over TCP;
// their replies are dropped. When the node crashes, everything in flight is
// lost and the client sees a reset.
type conn struct {
	l    *link
	id   int
	pipe net.Conn

	out chan outMsg
	in  chan []byte

	mu         sync.Mutex
	rdDeadline time.Time
	pending    []byte
	lastOut    time.Time // delivery time of the last request (TCP keeps order)
	lastIn     time.Time // arrival time of the last reply chunk
	inQ        []inMsg   // replies read from the node, not yet delivered
	inReady    chan struct{}
	reply      fate // fate of the request whose reply is being read
	closeOnce  sync.Once
	closed     chan struct{} // the client closed its end
	deadOnce   sync.Once
	dead       chan struct{} // the connection is gone (reset, or drained after a close)
	deadErr    error
}

type outMsg struct {
	data []byte
	at   time.Time
	f    fate
	cmd  string // description, for the timeline
}

var errReset = &net.OpError{Op: "read", Net: "sim", Err: syscall.ECONNRESET}

// kill ends the connection at once: a reset when the node crashes, or the end
// of a closed connection once its requests are delivered.
func (c *conn) kill(err error) {
	c.deadOnce.Do(func() {
		c.mu.Lock()
		if c.deadErr == nil {
			c.deadErr = err
		}
		c.mu.Unlock()
		close(c.dead)
		c.pipe.Close()
		c.l.node.untrack(c)
	})
}

func (c *conn) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deadErr
}

// Close closes the client's end; requests on the wire are still delivered.
func (c *conn) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		if c.deadErr == nil {
			c.deadErr = net.ErrClosed
		}
		c.mu.Unlock()
		close(c.closed)
	})
	return nil
}

func (c *conn) Write(b []byte) (int, error) {
	select {
	case <-c.closed:
		return 0, c.err()
	case <-c.dead:
		return 0, c.err()
	default:
	}
	w := c.l.w
	f := c.l.next()
	now := time.Now()
	if c.l.partitioned(w.since()) {
		f.reqLost = true
	}
	c.mu.Lock()
	at := now.Add(f.reqDelay)
	if at.Before(c.lastOut) {
		at = c.lastOut
	}
	c.lastOut = at
	c.mu.Unlock()
	msg := outMsg{data: append([]byte(nil), b...), at: at, f: f}
	if w.hist.netLog {
		// Described when the client sends it, so that tokens are named in
		// the order the client used them (see World.alias).
		msg.cmd = describe(b, &w.scripts, func(s string) string { return w.alias(c.l.client, s) })
	}
	select {
	case c.out <- msg:
	case <-c.dead:
		return 0, c.err()
	}
	return len(b), nil
}

// sleepUntil waits until t on the bubble's clock; false if the connection was
// reset or the world closed.
func (c *conn) sleepUntil(t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return true
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-c.dead:
		return false
	case <-c.l.w.done:
		return false
	}
}

func (c *conn) sender() {
	w := c.l.w
	for {
		var m outMsg
		select {
		case m = <-c.out:
		case <-c.closed:
			select {
			case m = <-c.out:
			default:
				c.kill(net.ErrClosed) // drained: the server sees the end of the stream
				return
			}
		case <-c.dead:
			return
		case <-w.done:
			c.kill(net.ErrClosed)
			return
		}
		if !c.sleepUntil(m.at) {
			c.kill(net.ErrClosed)
			return
		}
		if m.f.reqLost || c.l.partitioned(w.since()) {
			w.recordNet(c.l, m.f.seq, m.cmd+": request lost")
			continue
		}
		c.mu.Lock()
		c.reply = m.f
		c.mu.Unlock()
		if !c.l.node.exec(c.l, m.f.seq, m.cmd) {
			continue
		}
		if _, err := c.pipe.Write(m.data); err != nil {
			return
		}
	}
}

// receiver reads the node's replies as soon as the node writes them, so that
// the node never blocks on a write: miniredis writes pub/sub messages while
// holding a connection mutex, and a goroutine waiting for a mutex is not
// durably blocked, so a write waiting on a virtual-time delay would stop the
// bubble's clock. The delays are applied by deliver.
func (c *conn) receiver() {
	w := c.l.w
	buf := make([]byte, 4096)
	go c.deliver()
	for {
		n, err := c.pipe.Read(buf)
		if err != nil {
			c.kill(errReset)
			return
		}
		c.mu.Lock()
		f := c.reply
		c.mu.Unlock()
		select {
		case <-c.closed:
			// The client gave up on this connection: the reply is dropped
			// (not logged: whether it is read before the pipe closes is up
			// to the scheduler, within one virtual instant).
			continue
		default:
		}
		if f.replyLost || c.l.partitioned(w.since()) {
			w.recordNet(c.l, f.seq, "reply lost")
			continue
		}
		now := time.Now()
		c.mu.Lock()
		at := now.Add(f.replyDelay)
		if at.Before(c.lastIn) {
			at = c.lastIn
		}
		c.lastIn = at
		c.inQ = append(c.inQ, inMsg{data: append([]byte(nil), buf[:n]...), at: at})
		c.mu.Unlock()
		select {
		case c.inReady <- struct{}{}:
		default:
		}
	}
}

type inMsg struct {
	data []byte
	at   time.Time
}

// deliver hands the replies read by receiver to Read, each at its arrival
// time, in order.
func (c *conn) deliver() {
	for {
		c.mu.Lock()
		var m inMsg
		ok := len(c.inQ) > 0
		if ok {
			m = c.inQ[0]
			c.inQ = c.inQ[1:]
		}
		c.mu.Unlock()
		if !ok {
			select {
			case <-c.inReady:
				continue
			case <-c.dead:
				return
			}
		}
		if !c.sleepUntil(m.at) {
			return
		}
		select {
		case c.in <- m.data:
		case <-c.closed:
		case <-c.dead:
			return
		}
	}
}

func (c *conn) Read(b []byte) (int, error) {
	c.mu.Lock()
	if len(c.pending) > 0 {
		n := copy(b, c.pending)
		c.pending = c.pending[n:]
		c.mu.Unlock()
		return n, nil
	}
	dl := c.rdDeadline
	c.mu.Unlock()
	var timeout <-chan time.Time
	if !dl.IsZero() {
		d := time.Until(dl)
		if d <= 0 {
			return 0, os.ErrDeadlineExceeded
		}
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case data := <-c.in:
		n := copy(b, data)
		if n < len(data) {
			c.mu.Lock()
			c.pending = data[n:]
			c.mu.Unlock()
		}
		return n, nil
	case <-timeout:
		return 0, os.ErrDeadlineExceeded
	case <-c.closed:
		return 0, c.err()
	case <-c.dead:
		return 0, c.err()
	}
}

func (c *conn) LocalAddr() net.Addr  { return simAddr(c.l.actor()) }
func (c *conn) RemoteAddr() net.Addr { return simAddr(c.l.node.name) }

func (c *conn) SetDeadline(t time.Time) error {
	return errors.Join(c.SetReadDeadline(t), c.SetWriteDeadline(t))
}

func (c *conn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.rdDeadline = t
	c.mu.Unlock()
	return nil
}

// SetWriteDeadline is accepted and ignored: writes never block.
func (c *conn) SetWriteDeadline(time.Time) error { return nil }

type simAddr string

func (a simAddr) Network() string { return "sim" }
func (a simAddr) String() string  { return string(a) }

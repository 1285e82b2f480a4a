package harness

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// proxyMaxConns bounds the connections one proxy serves at once; more are
	// accepted and closed at once.
	proxyMaxConns = 128
	// proxyQueue bounds the chunks in flight per direction per connection.
	proxyQueue = 16
	// proxyChunk is the read buffer size.
	proxyChunk = 32 << 10
	// proxyDialTimeout bounds the dial to the node.
	proxyDialTimeout = 2 * time.Second
)

// proxy is a TCP forwarder on 127.0.0.1 that adds a configurable delay to
// every chunk of data, in each direction. Each accepted connection is
// forwarded to the address upstream returns at accept time, so the proxy's
// own address stays valid when the node's address changes.
//
// While the proxy is down (setDown), it closes every connection it accepts
// and keeps none open: what a client saw through Docker's port publication
// while the node was killed, stopped or cut off its network. The harness
// marks it down itself, rather than leaving a dial to a vanished container
// address to time out, because the proxy dials the container's address on
// its network when it can (Node.upstream), past Docker's userland proxy.
type proxy struct {
	ln       net.Listener
	upstream func() string
	latency  atomic.Int64 // time.Duration
	sem      chan struct{}
	done     chan struct{}
	wg       sync.WaitGroup

	mu     sync.Mutex
	closed bool
	down   bool
	conns  map[net.Conn]struct{}
}

func newProxy(upstream func() string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{
		ln:       ln,
		upstream: upstream,
		sem:      make(chan struct{}, proxyMaxConns),
		done:     make(chan struct{}),
		down:     true, // until the node first answers
		conns:    map[net.Conn]struct{}{},
	}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) setLatency(d time.Duration) {
	if d < 0 {
		d = 0
	}
	p.latency.Store(int64(d))
}

// setDown marks the node down (closing every open connection at once) or up
// again.
func (p *proxy) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for c := range p.conns {
			c.Close()
		}
	}
}

// close stops accepting, closes every open connection and waits for all
// goroutines of the proxy to finish.
func (p *proxy) close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	err := p.ln.Close()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

// track registers c so close and setDown can reach it; it reports false
// (and closes c) once the proxy is closed, and while it is down.
func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.down {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			select {
			case <-p.done:
				return
			case <-time.After(10 * time.Millisecond): // transient accept error
			}
			continue
		}
		select {
		case p.sem <- struct{}{}:
		default:
			c.Close() // over the bound
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer func() { <-p.sem }()
			p.handle(c)
		}()
	}
}

func (p *proxy) handle(client net.Conn) {
	if !p.track(client) {
		return
	}
	defer p.untrack(client)
	up, err := net.DialTimeout("tcp", p.upstream(), proxyDialTimeout)
	if err != nil {
		return // the client sees the connection closed
	}
	if !p.track(up) {
		return
	}
	defer p.untrack(up)

	// When either direction ends, tear down both.
	stop := make(chan struct{})
	var once sync.Once
	shut := func() {
		once.Do(func() {
			close(stop)
			client.Close()
			up.Close()
		})
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(up, client, stop, shut) }()
	go func() { defer wg.Done(); p.pipe(client, up, stop, shut) }()
	wg.Wait()
}

type chunk struct {
	data []byte
	due  time.Time
}

// pipe copies src to dst, holding every chunk until latency (sampled when the
// chunk arrives) has passed. Chunks are delayed independently, so pipelined
// traffic is not slowed down cumulatively. When pipe stops it calls shut,
// which closes both connections (unblocking the reader) and signals stop.
func (p *proxy) pipe(dst, src net.Conn, stop <-chan struct{}, shut func()) {
	q := make(chan chunk, proxyQueue)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(q)
		buf := make([]byte, proxyChunk)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				c := chunk{
					data: append([]byte(nil), buf[:n]...),
					due:  time.Now().Add(time.Duration(p.latency.Load())),
				}
				select {
				case q <- c:
				case <-stop:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		shut()
		wg.Wait()
	}()
	for {
		select {
		case <-stop:
			return
		case <-p.done:
			return
		case c, ok := <-q:
			if !ok {
				return
			}
			if wait := time.Until(c.due); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-stop:
					t.Stop()
					return
				case <-p.done:
					t.Stop()
					return
				}
			}
			if _, err := dst.Write(c.data); err != nil {
				return
			}
		}
	}
}

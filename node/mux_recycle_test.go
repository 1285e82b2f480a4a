package node

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// blockConn is a redis.Conn whose first Send blocks until released, and whose
// Receive blocks until the connection is closed.
type blockConn struct {
	inSend   chan struct{}
	release  chan struct{}
	closed   chan struct{}
	failRecv chan struct{}
	once     sync.Once
	mu       sync.Mutex
	sends    int
	sentArgs []any // the slice Send was given
	seen     string
}

func (c *blockConn) Close() error { c.once.Do(func() { close(c.closed) }); return nil }
func (c *blockConn) Err() error   { return nil }
func (c *blockConn) Do(string, ...any) (any, error) {
	return nil, errors.New("unused")
}
func (c *blockConn) Send(cmd string, args ...any) error {
	c.mu.Lock()
	c.sends++
	first := c.sends == 1
	c.mu.Unlock()
	if !first {
		return nil
	}
	c.sentArgs = args
	close(c.inSend)
	<-c.release // a write that blocks (a full socket buffer); meanwhile the conn fails
	// Now encode the arguments, as redigo's writeCommand does.
	seen := fmt.Sprintf("%s %v", cmd, args)
	c.mu.Lock()
	c.seen = seen
	c.mu.Unlock()
	return nil
}
func (c *blockConn) Flush() error { return nil }
func (c *blockConn) Receive() (any, error) {
	select {
	case <-c.closed:
	case <-c.failRecv: // an earlier reply's health timeout, a reset
	}
	return nil, errors.New("i/o timeout")
}
func (c *blockConn) ReceiveWithTimeout(time.Duration) (any, error) { return c.Receive() }
func (c *blockConn) DoWithTimeout(time.Duration, string, ...any) (any, error) {
	return nil, errors.New("unused")
}

// TestMuxRequestNotRecycledWhileSending: a request must not be recycled
// (its caller given the connection's failure) while the writer is still
// inside Send with the request's args, whose backing array is req.buf.
// Found by an adversarial review of the recycled requests: the request was
// pending before it was sent, a failing connection failed it, its caller
// recycled it, and the writer encoded another call's arguments (or cleared
// ones: a data race under -race, a possible crash of the writer). Now a
// request is pending only once sent.
func TestMuxRequestNotRecycledWhileSending(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for i := 0; i < 50; i++ {
		if recycleOnce(t) {
			return
		}
	}
	t.Log("no reuse observed")
}

func recycleOnce(t *testing.T) bool {
	bc := &blockConn{inSend: make(chan struct{}), release: make(chan struct{}), closed: make(chan struct{}), failRecv: make(chan struct{})}
	m := newMux(1, time.Second, time.Minute, func(context.Context) (redis.Conn, error) { return bc, nil })
	errc := make(chan error, 1)
	go func() {
		_, err := m.do(context.Background(), callMode{}, "EVALSHA", "hashA", 2, "lockA", "fenceA", "tokenA", int64(30000))
		errc <- err
	}()
	<-bc.inSend
	// The connection fails (the health timeout of an earlier reply, a reset,
	// or Close): the reader fails every pending request, A's caller gets its
	// error and recycles A.
	close(bc.failRecv)
	select {
	case err := <-errc:
		t.Logf("caller A got: %v", err)
	case <-time.After(200 * time.Millisecond):
		// A is not pending while it is being sent: nothing could fail it.
		close(bc.release)
		m.close()
		err := <-errc
		t.Logf("caller A got (after its send): %v; writer encoded %s", err, bc.getSeen())
		return true
	}
	// Another caller takes a request: the pool hands back A's.
	var b *muxReq
	for i := 0; i < 1000; i++ { // the race detector's Pool drops some Puts
		r := newMuxReq("EVALSHA", []any{"hashB", 2, "lockB", "fenceB", "tokenB", int64(1)})
		if &r.buf[0] == &bc.sentArgs[0] {
			b = r
			break
		}
	}
	close(bc.release)
	time.Sleep(50 * time.Millisecond)
	m.close()
	t.Logf("writer encoded: %s (reused: %v)", bc.getSeen(), b != nil)
	if bc.getSeen() != "EVALSHA [hashA 2 lockA fenceA tokenA 30000]" {
		t.Errorf("the writer sent another call's (or cleared) arguments for A: %s", bc.getSeen())
		return true
	}
	return false
}

func (c *blockConn) getSeen() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen
}

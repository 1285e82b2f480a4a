package harness

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BadNode is a loopback listener that misbehaves as a Redis node: the fault
// scenarios put one among healthy nodes. Close (registered with t.Cleanup)
// stops it and drops its connections.
type BadNode struct {
	addr  string
	close func()
}

// Addr is host:port of the bad node.
func (b *BadNode) Addr() string { return b.addr }

// URL is redis://Addr.
func (b *BadNode) URL() string { return "redis://" + b.addr }

// HungConnect is a node whose TCP connects never complete: a listening socket
// with the smallest backlog, filled and never accepted from, so the kernel drops
// further SYNs (what a host with a full backlog, or a firewall dropping SYNs,
// does). Linux only.
func HungConnect(tb testing.TB) *BadNode {
	tb.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		tb.Fatalf("harness.HungConnect: %v", err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err == nil {
		err = syscall.Listen(fd, 0)
	}
	if err != nil {
		syscall.Close(fd)
		tb.Fatalf("harness.HungConnect: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		syscall.Close(fd)
		tb.Fatalf("harness.HungConnect: %v", err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	// Fill the accept queue; the connects that complete stay unaccepted.
	var fillers []net.Conn
	for range 8 {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			break // the queue is full: connects now hang
		}
		fillers = append(fillers, c)
	}
	b := &BadNode{addr: addr, close: func() {
		for _, c := range fillers {
			c.Close()
		}
		syscall.Close(fd)
	}}
	tb.Cleanup(b.close)
	return b
}

// Stall is a node that accepts connections and reads whatever is sent but
// never writes a byte: a TLS handshake, or any command, waits forever.
func Stall(tb testing.TB) *BadNode {
	return serve(tb, "Stall", func(c net.Conn) {
		buf := make([]byte, 4096)
		for {
			if _, err := c.Read(buf); err != nil {
				return
			}
		}
	})
}

// Garbage is a node that answers every command with the next of replies (raw
// RESP, cycling), for instance a bulk length that does not fit in memory.
func Garbage(tb testing.TB, replies ...string) *BadNode {
	var mu sync.Mutex
	next := 0
	return serve(tb, "Garbage", func(c net.Conn) {
		r := bufio.NewReader(c)
		for {
			if _, err := readCommand(r); err != nil {
				return
			}
			mu.Lock()
			reply := replies[next%len(replies)]
			next++
			mu.Unlock()
			if _, err := c.Write([]byte(reply)); err != nil {
				return
			}
		}
	})
}

// readCommand reads one RESP array of bulk strings (a client command).
func readCommand(r *bufio.Reader) ([]string, error) {
	var n int
	if _, err := fmt.Fscanf(r, "*%d\r\n", &n); err != nil {
		return nil, err
	}
	args := make([]string, 0, min(n, 64))
	for range n {
		var l int
		if _, err := fmt.Fscanf(r, "$%d\r\n", &l); err != nil {
			return nil, err
		}
		b := make([]byte, l+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		args = append(args, string(b[:l]))
	}
	return args, nil
}

// serve runs handle for every connection of a new loopback listener.
func serve(tb testing.TB, what string, handle func(net.Conn)) *BadNode {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("harness.%s: %v", what, err)
	}
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				handle(c)
			})
		}
	})
	b := &BadNode{addr: l.Addr().String(), close: func() {
		l.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}}
	tb.Cleanup(b.close)
	return b
}

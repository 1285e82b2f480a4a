package node

import (
	"bytes"
	"errors"
	"io"
	"net"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/gomodule/redigo/redis"
)

// byteConn is a net.Conn that reads from a buffer and ignores the rest.
type byteConn struct {
	net.Conn
	r io.Reader
}

func (c byteConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c byteConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c byteConn) Close() error                     { return nil }
func (c byteConn) SetDeadline(time.Time) error      { return nil }
func (c byteConn) SetReadDeadline(time.Time) error  { return nil }
func (c byteConn) SetWriteDeadline(time.Time) error { return nil }

// receiveAll reads replies from data through the guard, with small limits,
// until an error; it returns the replies and that error.
func receiveAll(data []byte, lim replyLimits) ([]any, error) {
	return receiveFrom(bytes.NewReader(data), lim)
}

func receiveFrom(r io.Reader, lim replyLimits) ([]any, error) {
	c := redis.NewConn(newGuard(byteConn{r: r}, lim), 0, 0)
	var out []any
	for {
		v, err := c.Receive()
		if e, ok := err.(redis.Error); ok {
			v, err = e, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, v)
	}
}

// FuzzReplyGuard feeds arbitrary bytes to redigo's reader through the guard:
// nothing may panic, and no reply may exceed the limits. The seed corpus in
// testdata/fuzz/FuzzReplyGuard runs under plain go test.
func FuzzReplyGuard(f *testing.F) {
	f.Add([]byte("+OK\r\n:1\r\n$3\r\nabc\r\n*2\r\n$1\r\nx\r\n:-5\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		lim := replyLimits{bytes: 1 << 10, elems: 64}
		replies, err := receiveAll(data, lim)
		if err == nil {
			t.Fatal("the input ended without an error")
		}
		// How the bytes arrive changes nothing.
		split, err2 := receiveFrom(iotest.OneByteReader(bytes.NewReader(data)), lim)
		if !reflect.DeepEqual(split, replies) || err2.Error() != err.Error() {
			t.Fatalf("byte by byte: %v, %v; at once: %v, %v", split, err2, replies, err)
		}
		for _, v := range replies {
			if n := countElems(v, 0); n > lim.elems {
				t.Fatalf("reply with %d elements passed the %d limit", n, lim.elems)
			}
		}
	})
}

// countElems counts the array elements of a reply, checking depth and sizes.
func countElems(v any, depth int) int64 {
	vs, ok := v.([]any)
	if !ok {
		return 0
	}
	if depth >= MaxReplyDepth {
		panic("too deep")
	}
	n := int64(len(vs))
	for _, e := range vs {
		n += countElems(e, depth+1)
	}
	return n
}

func TestReplyGuard(t *testing.T) {
	ok := "+OK\r\n-ERR x\r\n:-9223372036854775808\r\n$-1\r\n*-1\r\n*0\r\n$0\r\n\r\n*2\r\n*1\r\n$2\r\nab\r\n:3\r\n"
	replies, err := receiveAll([]byte(ok), defaultLimits)
	if len(replies) != 8 || !errors.Is(err, io.EOF) {
		t.Fatalf("valid stream: %d replies, %v", len(replies), err)
	}
	// The same, a byte per read: headers and payloads split anywhere.
	split, err := receiveFrom(iotest.OneByteReader(strings.NewReader(ok)), defaultLimits)
	if !reflect.DeepEqual(split, replies) || !errors.Is(err, io.EOF) {
		t.Fatalf("byte by byte: %v, %v; want %v", split, err, replies)
	}
	for _, tt := range []struct{ in, want string }{
		{"$9223372036854775807\r\n", "reply too large"},
		{"$99999999999999999999\r\n", "reply too large"},
		{"*3000000000\r\n", "reply too large"},
		{strings.Repeat("*1\r\n", 100), "nested more than"},
		{"%2\r\n", "unexpected type byte"},
		{"$-2\r\n", "malformed reply: length"},
		{":12a\r\n", "malformed reply: integer"},
		{"$" + strings.Repeat("1", 40), "too long"},
		{"+" + strings.Repeat("x", 2<<10), "more than 1024 bytes"},
		{"*2\r\n$1020\r\n", "exceeds the 1024-byte"},
		{"*40\r\n*40\r\n", "exceeds the 64-element"},
	} {
		_, err := receiveAll([]byte("+before\r\n"+tt.in), replyLimits{bytes: 1 << 10, elems: 64})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v, want %q", tt.in, err, tt.want)
		}
		if !errors.Is(err, ErrReplyTooLarge) && !errors.Is(err, ErrMalformedReply) {
			t.Errorf("%q: %v is neither sentinel", tt.in, err)
		}
	}
}

// FuzzParseAcquired reads arbitrary replies as an acquisition script's: a
// reply is accepted only in the shapes the scripts produce, with a fence
// counter that fits a uint64 and a non-negative queue position; anything else
// is ErrUnexpectedReply, never a panic.
func FuzzParseAcquired(f *testing.F) {
	f.Add([]byte("*3\r\n:1\r\n$1\r\n7\r\n:1\r\n"))
	f.Add([]byte("*4\r\n:0\r\n$1\r\n0\r\n:0\r\n:3\r\n"))
	f.Add([]byte("*4\r\n:0\r\n$1\r\n0\r\n:0\r\n:-1\r\n"))
	f.Add([]byte("*2\r\n:1\r\n$1\r\n7\r\n-ERR x\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		replies, _ := receiveAll(data, replyLimits{bytes: 1 << 10, elems: 64})
		for _, v := range replies {
			a, err := ParseAcquiredReply(v)
			if err != nil {
				if !errors.Is(err, ErrUnexpectedReply) {
					t.Fatalf("%v: error %v is not ErrUnexpectedReply", v, err)
				}
				continue
			}
			vs := v.([]any)
			if len(vs) != 3 && len(vs) != 6 {
				t.Fatalf("accepted a reply of %d elements", len(vs))
			}
			if a.Ahead < 0 || (len(vs) == 3 && a.Ahead != 0) {
				t.Fatalf("%v: Ahead %d", v, a.Ahead)
			}
		}
	})
}

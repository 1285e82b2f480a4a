package node

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
)

// Errors of the reply guard, reachable with errors.Is. A connection that sees one
// is closed: the call fails with it, and the next call dials again.
var (
	// ErrReplyTooLarge reports a reply that declares more bytes or elements than
	// the node's limits allow (WithReplyLimits).
	ErrReplyTooLarge = errors.New("node: reply too large")
	// ErrMalformedReply reports bytes that are not a RESP2 reply.
	ErrMalformedReply = errors.New("node: malformed reply")
)

// Reply limits. Every reply this library reads is small (a script's result, a
// PING, INFO server, a pub/sub message naming a key), so the defaults leave room
// for very long keys while keeping what a hostile or broken node can make the
// client allocate small: at most DefaultMaxReplyBytes plus 16 bytes per element.
const (
	// DefaultMaxReplyBytes bounds the size of one reply: every byte of it,
	// bulk strings counted in full as soon as their header declares them.
	DefaultMaxReplyBytes = 4 << 20
	// DefaultMaxReplyElements bounds the number of array elements in one reply,
	// all levels of nesting together, counted as their header declares them.
	DefaultMaxReplyElements = 1 << 16
	// MaxReplyDepth bounds how deeply arrays nest in one reply (the parser
	// recurses once per level).
	MaxReplyDepth = 8
	// maxHeader bounds a length or integer line: "$", 20 digits or a sign, CRLF.
	maxHeader = 32
)

// WithReplyLimits sets the largest reply a dialed node accepts: maxBytes in
// [1 KiB, 512 MiB] (default DefaultMaxReplyBytes), maxElements array elements in
// [16, 1<<24] (default DefaultMaxReplyElements). A reply beyond them fails the
// call with ErrReplyTooLarge before the client allocates it, and closes the
// connection. FromPool refuses it: its nodes read replies with the pool's
// connections, which the limits cannot cover.
func WithReplyLimits(maxBytes, maxElements int64) Option {
	return optionFunc(func(c *config) error {
		if maxBytes < 1<<10 || maxBytes > 512<<20 {
			return fmt.Errorf("%w: reply byte limit %d must be in [1KiB, 512MiB]", ErrInvalidOption, maxBytes)
		}
		if maxElements < 16 || maxElements > 1<<24 {
			return fmt.Errorf("%w: reply element limit %d must be in [16, %d]", ErrInvalidOption, maxElements, 1<<24)
		}
		c.limits, c.limitsSet = replyLimits{bytes: maxBytes, elems: maxElements}, true
		return nil
	})
}

type replyLimits struct{ bytes, elems int64 }

var defaultLimits = replyLimits{bytes: DefaultMaxReplyBytes, elems: DefaultMaxReplyElements}

// guardConn sits between a connection and redigo's reader. It validates the
// RESP2 stream as it passes, and hands redigo the bytes of a header (a type byte
// and its length or integer) only once the header is complete and within limits;
// redigo allocates what a header declares before reading it, so an oversized or
// malformed length would otherwise panic (makeslice) or exhaust memory. Payloads
// pass through unscanned.
type guardConn struct {
	net.Conn
	lim   replyLimits
	buf   []byte // read from Conn, not yet handed out
	ok    int    // buf[:ok] is validated
	err   error  // sticky guard error
	chunk [4096]byte

	bulkLeft int64   // payload bytes (with CRLF) of the current bulk string still to pass
	inLine   bool    // inside a simple string or error line
	stack    []int64 // elements still expected by each open array
	size     int64   // bytes of the current reply so far (bulks as declared)
	elems    int64   // array elements of the current reply so far (as declared)
}

func newGuard(c net.Conn, lim replyLimits) *guardConn {
	if lim.bytes == 0 {
		lim = defaultLimits
	}
	return &guardConn{Conn: c, lim: lim}
}

// Read implements net.Conn: it returns validated bytes only.
func (g *guardConn) Read(p []byte) (int, error) {
	for {
		if g.ok > 0 {
			n := copy(p, g.buf[:g.ok])
			g.buf = g.buf[:copy(g.buf, g.buf[n:])]
			g.ok -= n
			return n, nil
		}
		if g.err != nil {
			return 0, g.err
		}
		if len(g.buf) > 0 {
			if g.err = g.scan(); g.ok > 0 || g.err != nil {
				continue
			}
		}
		n, err := g.Conn.Read(g.chunk[:])
		g.buf = append(g.buf, g.chunk[:n]...)
		if n == 0 && err != nil {
			return 0, err
		}
	}
}

// awaitReply waits until bytes have been read from Conn (kept in buf for
// Read) or a read fails, and returns true; or until Conn's read deadline
// passes with nothing read, and returns false, having consumed nothing.
// Redigo sets its own read deadline before each read.
func (g *guardConn) awaitReply() bool {
	if len(g.buf) > 0 || g.err != nil {
		return true
	}
	n, err := g.Conn.Read(g.chunk[:])
	g.buf = append(g.buf, g.chunk[:n]...)
	if n == 0 && err != nil {
		var ne net.Error
		return !(errors.As(err, &ne) && ne.Timeout()) // other errors: the next read meets them
	}
	return true
}

// scan validates as much of buf[ok:] as it can.
func (g *guardConn) scan() error {
	for g.ok < len(g.buf) {
		b := g.buf[g.ok:]
		switch {
		case g.bulkLeft > 0:
			k := int(min(int64(len(b)), g.bulkLeft))
			g.ok += k
			if g.bulkLeft -= int64(k); g.bulkLeft == 0 {
				g.done()
			}
		case g.inLine:
			i := bytes.IndexByte(b, '\n')
			k := len(b)
			if i >= 0 {
				k = i + 1
			}
			if err := g.grow(int64(k)); err != nil {
				return err
			}
			g.ok += k
			if i >= 0 {
				g.inLine = false
				g.done()
			}
		default:
			need, err := g.header(b)
			if err != nil || need {
				return err
			}
		}
	}
	return nil
}

// grow counts n more bytes of the current reply.
func (g *guardConn) grow(n int64) error {
	if g.size += n; g.size > g.lim.bytes {
		return fmt.Errorf("%w: more than %d bytes in one reply", ErrReplyTooLarge, g.lim.bytes)
	}
	return nil
}

// header validates the element that starts at b[0]. need reports that the
// header line is not complete yet.
func (g *guardConn) header(b []byte) (need bool, err error) {
	switch b[0] {
	case '+', '-':
		g.inLine = true
		g.ok++
		return false, g.grow(1)
	case ':', '$', '*':
	default:
		return false, fmt.Errorf("%w: unexpected type byte %q", ErrMalformedReply, b[0])
	}
	i := bytes.IndexByte(b, '\n')
	if i < 0 && len(b) < maxHeader {
		return true, nil
	}
	if i < 0 || i >= maxHeader { // the same error however the bytes arrive
		return false, fmt.Errorf("%w: header line %q… too long", ErrMalformedReply, b[:maxHeader])
	}
	if i < 2 || b[i-1] != '\r' {
		return false, fmt.Errorf("%w: bad header line %q", ErrMalformedReply, clip(b[:i+1]))
	}
	if err := g.grow(int64(i + 1)); err != nil {
		return false, err
	}
	if err := g.element(b[0], b[1:i-1]); err != nil {
		return false, err // the header is never handed out
	}
	g.ok += i + 1
	return false, nil
}

// element applies a complete header: type t, number text num.
func (g *guardConn) element(t byte, num []byte) error {
	if t == ':' {
		if _, err := strconv.ParseInt(string(num), 10, 64); err != nil || num[0] == '+' {
			return fmt.Errorf("%w: integer %q", ErrMalformedReply, clip(num))
		}
		g.done()
		return nil
	}
	if string(num) == "-1" { // null bulk string or array
		g.done()
		return nil
	}
	n, ok := parseNum(num)
	if !ok {
		return fmt.Errorf("%w: length %q", ErrMalformedReply, clip(num))
	}
	if t == '$' {
		if n > g.lim.bytes-g.size {
			return fmt.Errorf("%w: bulk string of %s bytes exceeds the %d-byte reply limit", ErrReplyTooLarge, num, g.lim.bytes)
		}
		g.bulkLeft = n + 2
		return g.grow(n + 2)
	}
	if n > g.lim.elems-g.elems {
		return fmt.Errorf("%w: array of %s elements exceeds the %d-element reply limit", ErrReplyTooLarge, num, g.lim.elems)
	}
	if len(g.stack) >= MaxReplyDepth {
		return fmt.Errorf("%w: arrays nested more than %d deep", ErrMalformedReply, MaxReplyDepth)
	}
	if n == 0 {
		g.done()
		return nil
	}
	g.elems += n
	g.stack = append(g.stack, n)
	return nil
}

// done records that an element ended, and the reply with it when it was the last.
func (g *guardConn) done() {
	for len(g.stack) > 0 {
		top := len(g.stack) - 1
		if g.stack[top]--; g.stack[top] > 0 {
			return
		}
		g.stack = g.stack[:top]
	}
	g.size, g.elems = 0, 0
}

// parseNum parses a length: decimal digits only, saturating at MaxInt64 (a
// length that long is too large, not malformed).
func parseNum(p []byte) (int64, bool) {
	if len(p) == 0 {
		return 0, false
	}
	var n int64
	for _, c := range p {
		if c < '0' || c > '9' {
			return 0, false
		}
		if n > (math.MaxInt64-9)/10 {
			n = math.MaxInt64
		} else {
			n = n*10 + int64(c-'0')
		}
	}
	return n, true
}

func clip(b []byte) []byte {
	if len(b) > maxHeader {
		return b[:maxHeader]
	}
	return b
}

package bench

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
)

// Requests counts the commands that clients send to Redis: every RESP array
// written on a connection it dialed is one command, whatever the server then
// runs for it (a script's internal calls are not requests). It is the
// client-side companion of the servers' total_commands_processed, which counts
// those internal calls too.
type Requests struct {
	n   atomic.Int64
	bad atomic.Int64 // connections whose stream could not be parsed
}

// Count returns the commands sent so far on the connections of r.
func (r *Requests) Count() int64 { return r.n.Load() }

// Unparsed returns how many connections wrote something that is not a stream
// of RESP arrays (their commands are not counted after that point).
func (r *Requests) Unparsed() int64 { return r.bad.Load() }

// DialContext dials like a net.Dialer and counts the commands written on the
// connection.
func (r *Requests) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return r.dial(ctx, &net.Dialer{}, network, addr)
}

// dial dials with d and counts the commands written on the connection.
func (r *Requests) dial(ctx context.Context, d *net.Dialer, network, addr string) (net.Conn, error) {
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &countedConn{Conn: c, r: r}, nil
}

// countedConn is a connection whose writes are parsed as RESP commands.
type countedConn struct {
	net.Conn
	r  *Requests
	mu sync.Mutex
	p  respCounter
}

func (c *countedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.mu.Lock()
	wasBad := c.p.bad
	k := c.p.feed(b[:n])
	if c.p.bad && !wasBad {
		c.r.bad.Add(1)
	}
	c.mu.Unlock()
	c.r.n.Add(k)
	return n, err
}

// maxLine bounds a RESP header line ("*<count>\r\n" or "$<length>\r\n").
const maxLine = 24

// respCounter parses a client's request stream, an unbounded sequence of
// RESP arrays of bulk strings fed in pieces of any size, and counts the
// arrays it completes. Anything else makes it bad, and it stops counting.
type respCounter struct {
	line  []byte // header line read so far (without "\r\n")
	args  int64  // bulk strings still to come in the current array; 0 between commands
	skip  int64  // bytes of the current bulk string (plus its "\r\n") still to skip
	inCmd bool   // an array header was read and its command is not complete
	bad   bool
}

// feed consumes b and returns the number of commands it completed.
func (p *respCounter) feed(b []byte) int64 {
	var done int64
	for len(b) > 0 && !p.bad {
		if p.skip > 0 {
			k := min(p.skip, int64(len(b)))
			p.skip -= k
			b = b[k:]
			if p.skip == 0 {
				p.args--
				done += p.finish()
			}
			continue
		}
		i := 0
		for i < len(b) && b[i] != '\n' {
			i++
		}
		p.line = append(p.line, b[:i]...)
		if len(p.line) > maxLine {
			p.bad = true
			break
		}
		if i == len(b) {
			break // the line goes on in the next piece
		}
		b = b[i+1:]
		done += p.header()
	}
	return done
}

// header handles a complete header line.
func (p *respCounter) header() int64 {
	line := p.line
	p.line = p.line[:0]
	if len(line) < 3 || line[len(line)-1] != '\r' {
		p.bad = true
		return 0
	}
	v, ok := parseCount(line[1 : len(line)-1])
	if !ok {
		p.bad = true
		return 0
	}
	switch {
	case line[0] == '*' && !p.inCmd:
		p.inCmd, p.args = true, v
		return p.finish()
	case line[0] == '$' && p.inCmd && p.args > 0:
		p.skip = v + 2
		return 0
	}
	p.bad = true
	return 0
}

// finish completes the current command when no argument is left.
func (p *respCounter) finish() int64 {
	if p.inCmd && p.args == 0 {
		p.inCmd = false
		return 1
	}
	return 0
}

// parseCount reads a non-negative decimal of at most 18 digits.
func parseCount(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var v int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	return v, true
}

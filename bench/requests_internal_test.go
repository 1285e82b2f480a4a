package bench

import (
	"bytes"
	"errors"
	"strconv"
	"testing"
)

// encode writes args as one RESP command.
func encode(args ...string) []byte {
	var b bytes.Buffer
	b.WriteString("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		b.WriteString("$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n")
	}
	return b.Bytes()
}

func TestRespCounter(t *testing.T) {
	stream := bytes.Join([][]byte{
		encode("SET", "k", "v", "NX", "PX", "10000"),
		encode("EVALSHA", "abc", "1", "k", "tok*\r\n$3\r\n"), // RESP inside a value
		encode("PING"),
		encode(),
		encode("SET", "", ""),
	}, nil)
	for _, c := range []struct {
		name  string
		in    []byte
		want  int64
		isBad bool
	}{
		{"five commands", stream, 5, false},
		{"cut inside the last", stream[:len(stream)-3], 4, false},
		{"inline command", []byte("PING\r\n"), 0, true},
		{"negative length", []byte("*1\r\n$-1\r\n"), 0, true},
		{"no CR", []byte("*1\n"), 0, true},
		{"header too long", []byte("*1\r\n$" + string(bytes.Repeat([]byte("9"), 40)) + "\r\n"), 0, true},
		{"bulk outside a command", []byte("$3\r\nabc\r\n"), 0, true},
		{"then garbage: the first still counts", append(encode("PING"), "+OK\r\n"...), 1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var p respCounter
			if got := p.feed(c.in); got != c.want || p.bad != c.isBad {
				t.Fatalf("feed = %d (bad %v), want %d (bad %v)", got, p.bad, c.want, c.isBad)
			}
		})
	}
	// Cut anywhere, and fed a byte at a time, the stream counts the same.
	for cut := range len(stream) + 1 {
		var p respCounter
		if got := p.feed(stream[:cut]) + p.feed(stream[cut:]); got != 5 || p.bad {
			t.Fatalf("cut at %d: %d commands (bad %v), want 5", cut, got, p.bad)
		}
	}
	var p respCounter
	var n int64
	for i := range stream {
		n += p.feed(stream[i : i+1])
	}
	if n != 5 || p.bad {
		t.Fatalf("byte by byte: %d commands (bad %v), want 5", n, p.bad)
	}
}

// FuzzRespCounter: any input, cut anywhere, counts the same as in one piece,
// and never panics; a valid command appended to a good stream counts one more.
func FuzzRespCounter(f *testing.F) {
	f.Add(encode("SET", "k", "v"), uint16(3), "GET")
	f.Add([]byte("*2\r\n$1\r\na\r\n$1\r\nb\r\n"), uint16(9), "")
	f.Add([]byte("*1\r\n$99999999999999999\r\n"), uint16(5), "PING")
	f.Fuzz(func(t *testing.T, in []byte, cut uint16, arg string) {
		var whole respCounter
		n := whole.feed(in)
		k := int(cut) % (len(in) + 1)
		var parts respCounter
		if m := parts.feed(in[:k]) + parts.feed(in[k:]); m != n || parts.bad != whole.bad {
			t.Fatalf("cut at %d: %d (bad %v), whole: %d (bad %v)", k, m, parts.bad, n, whole.bad)
		}
		if whole.bad || whole.inCmd || whole.skip > 0 || len(whole.line) > 0 {
			return
		}
		if got := whole.feed(encode("ECHO", arg)); got != 1 || whole.bad {
			t.Fatalf("a command after a good stream: %d (bad %v)", got, whole.bad)
		}
	})
}

// A count taken for a measured loop waits until the servers are quiet: the
// last node's commands of a pair decided on a majority land after it.
func TestCounterSettled(t *testing.T) {
	reads := []int64{10, 12, 15, 15, 15}
	i := 0
	c := Counter(func() (int64, error) {
		v := reads[min(i, len(reads)-1)]
		i++
		return v, nil
	})
	if got := c.settled(); got != 15 {
		t.Fatalf("settled = %d, want 15 (the count once two reads agree)", got)
	}
	if got := Counter(nil).settled(); got != -1 {
		t.Fatalf("nil counter settled = %d, want -1", got)
	}
	failing := Counter(func() (int64, error) { return 0, errors.New("down") })
	if got := failing.settled(); got != -1 {
		t.Fatalf("failing counter settled = %d, want -1", got)
	}
}

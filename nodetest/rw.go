package nodetest

import (
	"context"
	"testing"
	"time"

	"github.com/redlock-go/redlock/node"
)

// readWrite checks node.RWLocker: readers share, a writer is refused while a
// reader holds (and leaves its mark, which refuses new readers until it
// expires or the writer is granted), a reader is refused while a writer
// holds; a reader joining with a shorter TTL, and its expiry, never shorten
// the life of the readers already in; ExtendRead never re-adds a reader,
// ReleaseRead is per token and notifies the key's watchers once no reader is
// left.
func (s *suite) readWrite(t *testing.T, n node.Node, k keys) {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	read := func(tok string, ttl time.Duration) bool {
		t.Helper()
		a, err := n.AcquireRead(c, k.lock, tok, ttl)
		if err != nil {
			t.Fatalf("AcquireRead: %v", err)
		}
		return a.OK
	}
	write := func(tok, writer string, wait time.Duration) node.Acquired {
		t.Helper()
		a, err := n.AcquireWrite(c, k.lock, k.fence, tok, time.Minute, writer, wait)
		if err != nil {
			t.Fatalf("AcquireWrite: %v", err)
		}
		return a
	}
	long, short := token(), token()
	if !read(long, time.Minute) || !read(short, 30*time.Millisecond) {
		t.Fatal("two readers on a free key: refused")
	}
	// Without a writer id, a refused writer leaves no mark.
	if a := write(token(), "", time.Minute); a.OK {
		t.Fatal("AcquireWrite granted while readers hold")
	}
	if !read(token(), time.Minute) {
		t.Fatal("a reader refused after a writer without an id was refused: it left a mark")
	}
	// The short reader's expiry leaves the long one, and a writer out.
	time.Sleep(60 * time.Millisecond) // no signal tells a lease ran out
	if a := write(token(), "", time.Minute); a.OK {
		t.Fatal("AcquireWrite granted while the long reader holds, after a later reader with a shorter TTL expired")
	}
	ok, err := n.ExtendRead(c, k.lock, short, time.Minute)
	must(t, "ExtendRead of a reader whose lease ran out", ok, err, false)
	ok, err = n.ExtendRead(c, k.lock, long, time.Minute)
	must(t, "ExtendRead of a live reader", ok, err, true)

	// A writer waiting for readers keeps new ones out while its mark lives.
	k2 := keys{lock: k.lock + "-2", fence: k.fence + "-2"}
	r := token()
	a, err := n.AcquireRead(c, k2.lock, r, time.Minute)
	if err != nil || !a.OK {
		t.Fatalf("AcquireRead on a fresh key: %+v, %v", a, err)
	}
	w, err := n.AcquireWrite(c, k2.lock, k2.fence, token(), time.Minute, "writer-1", 200*time.Millisecond)
	if err != nil || w.OK {
		t.Fatalf("AcquireWrite while a reader holds: %+v, %v; want refused", w, err)
	}
	if a, err := n.AcquireRead(c, k2.lock, token(), time.Minute); err != nil || a.OK {
		t.Fatalf("AcquireRead while a writer waits: %+v, %v; want refused", a, err)
	}
	watch, stop, err := n.Watch(c, k2.lock)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	defer stop()
	drain(watch)
	ok, err = n.ReleaseRead(c, k2.lock, token(), true)
	must(t, "ReleaseRead of another token", ok, err, false)
	ok, err = n.ReleaseRead(c, k2.lock, r, true)
	must(t, "ReleaseRead", ok, err, true)
	select {
	case <-watch:
	case <-c.Done():
		t.Fatal("the last reader's ReleaseRead with notify was not notified within 20s")
	}
	wt := token()
	a, err = n.AcquireWrite(c, k2.lock, k2.fence, wt, time.Minute, "writer-1", 200*time.Millisecond)
	if err != nil || !a.OK {
		t.Fatalf("AcquireWrite once the readers left: %+v, %v", a, err)
	}
	if a, err := n.AcquireRead(c, k2.lock, token(), time.Minute); err != nil || a.OK {
		t.Fatalf("AcquireRead while a writer holds: %+v, %v; want refused", a, err)
	}
	if a := write(token(), "", time.Minute); a.OK {
		t.Fatal("a second writer granted")
	}
	ok, err = n.Release(c, k2.lock, wt, true)
	must(t, "Release of the writer", ok, err, true)
	if !read(token(), time.Minute) {
		// The mark is the granted writer's own: its grant removed it.
		t.Fatal("a reader refused after the writer released")
	}
}

// leaveWrite checks RWLocker.LeaveWrite: a waiting writer's mark is removed
// by its own id only, and its removal tells key's watchers.
func (s *suite) leaveWrite(t *testing.T, n node.Node, k keys) {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if a, err := n.AcquireRead(c, k.lock, token(), time.Minute); err != nil || !a.OK {
		t.Fatalf("AcquireRead on a fresh key: %+v, %v", a, err)
	}
	if a, err := n.AcquireWrite(c, k.lock, k.fence, token(), time.Minute, "writer-1", time.Minute); err != nil || a.OK {
		t.Fatalf("AcquireWrite while a reader holds: %+v, %v; want refused", a, err)
	}
	ok, err := n.LeaveWrite(c, k.lock, "writer-2")
	must(t, "LeaveWrite of another writer", ok, err, false)
	if a, err := n.AcquireRead(c, k.lock, token(), time.Minute); err != nil || a.OK {
		t.Fatalf("AcquireRead while the writer's mark stays: %+v, %v; want refused", a, err)
	}
	watch, stop, err := n.Watch(c, k.lock)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	defer stop()
	drain(watch)
	ok, err = n.LeaveWrite(c, k.lock, "writer-1")
	must(t, "LeaveWrite of the writer", ok, err, true)
	select {
	case <-watch:
	case <-c.Done():
		t.Fatal("LeaveWrite was not notified within 20s")
	}
	if a, err := n.AcquireRead(c, k.lock, token(), time.Minute); err != nil || !a.OK {
		t.Fatalf("AcquireRead once the writer left: %+v, %v", a, err)
	}
	ok, err = n.LeaveWrite(c, k.lock, "writer-1")
	must(t, "LeaveWrite twice", ok, err, false)
}

package nodetest

import (
	"context"
	"testing"
	"time"

	"github.com/redlock-go/redlock/node"
)

// meta checks the holder's metadata (node.Node.WriteMeta, ReadMeta): written
// only by the lock's holder, read back only while that holder holds the lock,
// renewed by Extend, announced on node.MetaKey's channel, and never a grant.
func (s *suite) meta(t *testing.T, n node.Node, k keys) {
	a, b := token(), token()
	m := node.Meta{Term: 7, Rev: 3, Since: time.UnixMilli(time.Now().UnixMilli()), Value: "leader a\nline 2"}
	ok, err := n.WriteMeta(ctx(t), k.lock, a, m, time.Minute)
	must(t, "WriteMeta without the lock", ok, err, false)
	if !acquire(t, n, k, b, time.Minute).OK {
		t.Fatal("WriteMeta created the lock key")
	}
	if _, found, err := n.ReadMeta(ctx(t), k.lock); err != nil || found {
		t.Fatalf("ReadMeta of a holder without metadata: found %v, err %v", found, err)
	}
	ok, err = n.Release(ctx(t), k.lock, b, false)
	must(t, "Release", ok, err, true)

	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, stop, err := n.Watch(c, node.MetaKey(k.lock))
	if err != nil {
		t.Fatalf("Watch of the metadata key: %v", err)
	}
	defer stop()
	drain(ch)
	if !acquire(t, n, k, a, time.Minute).OK {
		t.Fatal("Acquire on a free key refused")
	}
	ok, err = n.WriteMeta(ctx(t), k.lock, a, m, 600*time.Millisecond)
	must(t, "WriteMeta by the holder", ok, err, true)
	ok, err = n.Extend(ctx(t), k.lock, a, time.Minute)
	must(t, "Extend", ok, err, true)
	select {
	case <-ch:
	case <-c.Done():
		t.Fatal("a WriteMeta was not notified on the metadata key's channel within 10s")
	}
	time.Sleep(800 * time.Millisecond) // past the metadata's first TTL
	got, found, err := n.ReadMeta(ctx(t), k.lock)
	if err != nil || !found || got.Term != m.Term || got.Rev != m.Rev || !got.Since.Equal(m.Since) || got.Value != m.Value {
		t.Fatalf("ReadMeta after Extend, past the first TTL = %+v, %v, %v; want %+v (Extend must renew the metadata)", got, found, err, m)
	}
	ok, err = n.Release(ctx(t), k.lock, a, false)
	must(t, "Release by the holder", ok, err, true)
	if _, found, err := n.ReadMeta(ctx(t), k.lock); err != nil || found {
		t.Fatalf("ReadMeta after the release: found %v, err %v", found, err)
	}
	// Another holder does not inherit the leftover.
	if !acquire(t, n, k, b, time.Minute).OK {
		t.Fatal("Acquire after the release refused")
	}
	if _, found, err := n.ReadMeta(ctx(t), k.lock); err != nil || found {
		t.Fatalf("ReadMeta returned an earlier holder's metadata to the next: found %v, err %v", found, err)
	}
}

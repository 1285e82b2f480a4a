package node_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

// BenchmarkScripts measures one acquire + release script pair against a real
// node, sequentially and from many goroutines (pipelined).
func BenchmarkScripts(b *testing.B) {
	s := redistest.Start(b)
	n, err := node.Dial(s.URL())
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	ctx := context.Background()
	pair := func(key string) {
		if _, err := n.Acquire(ctx, key, key+":f", "tok", time.Second); err != nil {
			b.Fatal(err)
		}
		if _, err := n.Release(ctx, key, "tok", false); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("sequential", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			pair("k")
		}
	})
	b.Run("parallel", func(b *testing.B) {
		var id atomic.Int64
		b.ReportAllocs()
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			key := fmt.Sprintf("k%d", id.Add(1))
			for pb.Next() {
				pair(key)
			}
		})
	})
}

package quorum_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/redlock-go/redlock/quorum"
)

// BenchmarkFanout measures the fan-out and majority decision alone, against
// nodes that answer at once.
func BenchmarkFanout(b *testing.B) {
	for _, n := range []int{1, 3, 5} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			op := func(context.Context, int) (int, bool, error) { return 0, true, nil }
			ctx := context.Background()
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				c := quorum.Start(ctx, n, op, quorum.Options[int]{})
				if o := c.Wait(ctx); !o.Success {
					b.Fatal("no majority")
				}
				<-c.Settled()
			}
		})
	}
}

package redlock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/fence"
)

// A leader election over three nodes: the leader's term is a fencing token,
// so a resource the leaders write to refuses a deposed leader's late write.
func ExampleClient_Campaign() {
	urls, stop := exampleNodes(3)
	defer stop()

	client, err := redlock.Dial(urls, redlock.WithTTL(5*time.Second))
	if err != nil {
		panic(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// The resource the leaders write to: it keeps the highest term it saw.
	var schedule fence.Value[string]

	leader, err := client.Campaign(ctx, "scheduler", "host-a:8080")
	if err != nil {
		fmt.Println("not elected:", err)
		return
	}
	fmt.Println("leading, term", leader.Term())
	// Work while leader.Context() lasts: it ends before the lease can lapse.
	_ = schedule.Store(leader.Term(), "plan by host-a")
	if err := leader.Proclaim(ctx, "host-a:9090"); err != nil {
		fmt.Println("proclaim:", err)
	}
	info, err := client.Leader(ctx, "scheduler")
	if err != nil {
		fmt.Println("leader:", err)
		return
	}
	fmt.Println("leader:", info.Value, "term", info.Term)

	// Resigning lets the next candidate in at once.
	if err := leader.Resign(ctx); err != nil {
		fmt.Println("resign:", err)
	}
	next, err := client.Campaign(ctx, "scheduler", "host-b:8080")
	if err != nil {
		fmt.Println("not elected:", err)
		return
	}
	defer next.Resign(context.Background())
	fmt.Println("next leader, term", next.Term())
	_ = schedule.Store(next.Term(), "plan by host-b")
	// The first leader's late write carries an older term: refused.
	fmt.Println(schedule.Store(leader.Term(), "late plan by host-a"))
	// Output:
	// leading, term 1
	// leader: host-a:9090 term 1
	// next leader, term 2
	// fence: stale token 1: 2 already accepted
}

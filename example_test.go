package redlock_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/fence"
	"github.com/redlock-go/redlock/redistest"
)

// exampleNodes starts n real redis-server processes on loopback ports for the
// examples (redistest.Launch: persistence off, files in a temporary directory);
// a real deployment lists its own independent Redis instances. stop kills them.
func exampleNodes(n int) (urls []string, stop func()) {
	dir, err := os.MkdirTemp("", "redlock-example-")
	if err != nil {
		panic(err)
	}
	var ps []*redistest.Process
	stop = func() {
		for _, p := range ps {
			p.Kill()
		}
		_ = os.RemoveAll(dir)
	}
	for range n {
		p, err := redistest.Launch("redis-server", dir)
		if err != nil {
			stop()
			panic(err)
		}
		ps = append(ps, p)
		urls = append(urls, p.URL())
	}
	return urls, stop
}

// TestMain skips the examples, which need redis-server, when it is not on PATH,
// as redistest.Start skips the tests; under REDLOCK_REQUIRE_REDIS=1 they run and
// fail instead.
func TestMain(m *testing.M) {
	flag.Parse()
	if _, err := exec.LookPath("redis-server"); err != nil && os.Getenv(redistest.RequireEnv) != "1" {
		fmt.Fprintf(os.Stderr, "redis-server not found on PATH: skipping the examples (apt-get install -y redis-server); set %s=1 to fail instead\n", redistest.RequireEnv)
		skip := "^Example"
		if old := flag.Lookup("test.skip").Value.String(); old != "" {
			skip += "|" + old
		}
		if err := flag.Set("test.skip", skip); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}

func Example() {
	urls, stop := exampleNodes(3)
	defer stop()

	client, err := redlock.Dial(urls, redlock.WithTTL(5*time.Second))
	if err != nil {
		panic(err)
	}
	defer client.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	lock, err := client.Lock(ctx, "nightly-report")
	if err != nil {
		fmt.Println("not acquired:", err)
		return
	}
	defer lock.Release(context.Background())

	// Check the lease before each protected action.
	if time.Now().Before(lock.Until()) {
		fmt.Println("holding", lock.Resource())
	}
	// Output: holding nightly-report
}

func ExampleClient_TryLock() {
	urls, stop := exampleNodes(3)
	defer stop()
	client, _ := redlock.Dial(urls)
	defer client.Close()
	ctx := context.Background()

	first, _ := client.TryLock(ctx, "invoice-42")
	_, err := client.TryLock(ctx, "invoice-42")
	fmt.Println(errors.Is(err, redlock.ErrNotAcquired))

	var qe *redlock.QuorumError
	if errors.As(err, &qe) {
		fmt.Printf("need %d of %d nodes\n", qe.Need, qe.Nodes)
	}
	_ = first.Release(ctx)
	// Output:
	// true
	// need 2 of 3 nodes
}

func ExampleLock_Extend() {
	urls, stop := exampleNodes(1) // single-node mode: same API
	defer stop()
	client, _ := redlock.Dial(urls, redlock.WithTTL(time.Second))
	defer client.Close()
	ctx := context.Background()

	lock, _ := client.Lock(ctx, "long-job")
	before := lock.Until()
	if err := lock.Extend(ctx); err != nil {
		fmt.Println("lost:", errors.Is(err, redlock.ErrLockLost))
		return
	}
	fmt.Println(!lock.Until().Before(before))
	_ = lock.Release(ctx)
	// Output: true
}

func ExampleClient_Do() {
	urls, stop := exampleNodes(3)
	defer stop()
	client, _ := redlock.Dial(urls, redlock.WithTTL(time.Second))
	defer client.Close()

	err := client.Do(context.Background(), "nightly-report", func(ctx context.Context) error {
		// Long work goes here; the lease is renewed in the background, and ctx
		// ends before the lock could be lost.
		return ctx.Err()
	}, redlock.WithMaxHold(time.Minute))
	fmt.Println(err)
	// Output: <nil>
}

func ExampleLock_Fence() {
	urls, stop := exampleNodes(1) // the same over several nodes, whose counters stay ordered
	defer stop()
	client, _ := redlock.Dial(urls)
	defer client.Close()
	ctx := context.Background()

	var account fence.Value[int] // the protected resource keeps the highest token
	first, _ := client.Lock(ctx, "account-7")
	t1, _ := first.Fence(ctx)
	_ = first.Release(ctx)

	second, _ := client.Lock(ctx, "account-7")
	t2, _ := second.Fence(ctx)
	fmt.Println(account.Store(t2, 100))                          // the current holder writes
	fmt.Println(errors.Is(account.Store(t1, 0), fence.ErrStale)) // a late write of the first holder
	_ = second.Release(ctx)
	// Output:
	// <nil>
	// true
}

func ExampleClient_Health() {
	urls, stop := exampleNodes(3)
	defer stop()
	urls[2] = "redis://127.0.0.1:1" // nothing listens there
	client, err := redlock.Dial(urls, redlock.WithHooks(redlock.Hooks{
		OnNodeHealth: func(e redlock.NodeHealthEvent) {
			fmt.Printf("hook: %s -> %s (%s)\n", e.From, e.State, e.LastErrorKind)
		},
	}))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	lock, err := client.TryLock(ctx, "invoice-42") // two of three nodes agree
	if err != nil {
		panic(err)
	}
	_ = lock.Release(ctx)
	client.Close() // waits for the third node's answer

	for i, h := range client.Health() {
		if h.State == redlock.NodeOK {
			fmt.Println(i, h.State)
			continue
		}
		fmt.Println(i, h.State, h.LastErrorKind)
	}
	// Output:
	// hook: ok -> failing (refused)
	// 0 ok
	// 1 ok
	// 2 failing refused
}

package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redlock-go/redlock"
)

// A semaphore of 2 permits over 3 nodes: at most two holders at once, each
// permit a lease that expires if its holder crashes. Acquire waits for a
// release; TryAcquire does not.
func ExampleClient_Semaphore() {
	urls, stop := exampleNodes(3)
	defer stop()
	client, err := redlock.Dial(urls)
	if err != nil {
		panic(err)
	}
	defer client.Close()
	ctx := context.Background()

	sem, err := client.Semaphore("encoders", 2, redlock.WithPermitTTL(10*time.Second))
	if err != nil {
		panic(err)
	}
	a, err := sem.Acquire(ctx)
	if err != nil {
		panic(err)
	}
	b, err := sem.Acquire(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("two permits held, in distinct slots:", a.Slot() != b.Slot())

	_, err = sem.TryAcquire(ctx)
	fmt.Println("a third is refused:", errors.Is(err, redlock.ErrNotAcquired))

	// A waiter is woken by the release.
	got := make(chan *redlock.Permit)
	go func() {
		p, err := sem.Acquire(ctx)
		if err != nil {
			panic(err)
		}
		got <- p
	}()
	if err := a.Extend(ctx); err != nil { // a permit's lease can be renewed
		panic(err)
	}
	if err := a.Release(ctx); err != nil {
		panic(err)
	}
	c := <-got
	fmt.Println("the waiter got the released slot:", c.Slot() == a.Slot())

	_ = b.Release(ctx)
	_ = c.Release(ctx)

	// Output:
	// two permits held, in distinct slots: true
	// a third is refused: true
	// the waiter got the released slot: true
}

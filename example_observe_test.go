package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redlock-go/redlock"
)

// Observe streams an election's leader as it changes, without polling: the
// vacancy it starts with, each new leader (or value), and the vacancy a
// resignation leaves.
func ExampleClient_Observe() {
	urls, stop := exampleNodes(3)
	defer stop()
	client, err := redlock.Dial(urls)
	if err != nil {
		panic(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	leaders, err := client.Observe(ctx, "scheduler")
	if err != nil {
		panic(err)
	}
	show := func() {
		li := <-leaders
		if li.Vacant() {
			fmt.Println("nobody leads", li.Name)
			return
		}
		fmt.Printf("%s leads %s, term %d\n", li.Value, li.Name, li.Term)
	}
	show()
	leader, err := client.Campaign(ctx, "scheduler", "host-a:8080")
	if err != nil {
		panic(err)
	}
	show()
	if err := leader.Resign(ctx); err != nil {
		panic(err)
	}
	show()
	// Output:
	// nobody leads scheduler
	// host-a:8080 leads scheduler, term 1
	// nobody leads scheduler
}

// WithMetadata stores a short record of who holds a plain lock beside it
// (redlock status prints it too); Leader reads it back, while the lock is
// held, from a majority.
func ExampleWithMetadata() {
	urls, stop := exampleNodes(3)
	defer stop()
	client, err := redlock.Dial(urls)
	if err != nil {
		panic(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	lock, err := client.Lock(ctx, "nightly-report", redlock.WithMetadata("host-1 pid 42"))
	if err != nil {
		panic(err)
	}
	holder, err := client.Leader(ctx, "nightly-report")
	if err != nil {
		panic(err)
	}
	fmt.Println("held by", holder.Value)
	// Released, the record goes with the lock. (Leader can still see it on a
	// node where the release has not landed yet: Release returns at a
	// majority, and a node whose acquisition was still in flight is
	// released as its acquisition lands.)
	if err := lock.Release(ctx); err != nil {
		panic(err)
	}
	// Output:
	// held by host-1 pid 42
}

// The write side of a read-write lock: a writer excludes readers and other
// writers, and its fencing token is larger for every later writer, so a
// resource can refuse a deposed writer's late write.
func ExampleClient_WLock() {
	urls, stop := exampleNodes(3)
	defer stop()
	client, err := redlock.Dial(urls)
	if err != nil {
		panic(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	write := func() *redlock.Lock {
		w, err := client.WLock(ctx, "catalog", redlock.WithFence())
		if err != nil {
			panic(err)
		}
		token, err := w.Fence(ctx)
		if err != nil {
			panic(err)
		}
		fmt.Println("writing, token", token)
		return w
	}
	w := write()
	_, err = client.TryRLock(ctx, "catalog")
	fmt.Println("a reader meanwhile:", errors.Is(err, redlock.ErrNotAcquired))
	_, err = client.TryWLock(ctx, "catalog")
	fmt.Println("another writer meanwhile:", errors.Is(err, redlock.ErrNotAcquired))
	if err := w.Release(ctx); err != nil {
		panic(err)
	}
	_ = write().Release(ctx)
	// Output:
	// writing, token 1
	// a reader meanwhile: true
	// another writer meanwhile: true
	// writing, token 2
}

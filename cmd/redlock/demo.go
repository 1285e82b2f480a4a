package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/fence"
)

// timeline prints events with the time since the demo started.
type timeline struct {
	mu    sync.Mutex
	out   io.Writer
	start time.Time
}

func (t *timeline) say(who, format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.out, "%+8.1fms  %-9s %s\n", float64(time.Since(t.start).Microseconds())/1000, who, fmt.Sprintf(format, args...))
}

func (t *timeline) section(title string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.out, "\n== %s\n", title)
}

// demo runs the demonstration on n embedded nodes.
func demo(out io.Writer, n int) error {
	servers, urls, err := startEmbedded(n)
	defer func() {
		for _, m := range servers {
			m.Close()
		}
	}()
	if err != nil {
		return err
	}
	client, err := redlock.Dial(urls, redlock.WithTTL(time.Second), redlock.WithNodeTimeout(200*time.Millisecond))
	if err != nil {
		return err
	}
	defer client.Close()

	tl := &timeline{out: out, start: time.Now()}
	fmt.Fprintf(out, "redlock demo: %d embedded Redis nodes, majority %d, TTL 1s\n", n, n/2+1)

	tl.section("1. four workers contend for the lock \"nightly-report\"")
	if err := contend(client, tl, 4, 3); err != nil {
		return err
	}
	if n >= 3 {
		if err := killMinority(client, tl, servers, urls); err != nil {
			return err
		}
	}
	if err := pausedHolder(client, tl); err != nil {
		return err
	}
	if err := fenced(client, tl); err != nil {
		return err
	}
	fmt.Fprintln(out, "\nA holder must check Until() before acting; fencing tokens make the resource itself refuse a late writer.")
	return nil
}

// startEmbedded starts n in-process Redis nodes; the caller closes those
// returned, even with an error.
func startEmbedded(n int) ([]*miniredis.Miniredis, []string, error) {
	var servers []*miniredis.Miniredis
	var urls []string
	for range n {
		m := miniredis.NewMiniRedis()
		m.ClockTTL(true) // TTLs run down with the clock, as in a real Redis
		if err := startBelowEphemeral(m); err != nil {
			return servers, nil, fmt.Errorf("start embedded node: %w", err)
		}
		servers = append(servers, m)
		urls = append(urls, "redis://"+m.Addr())
	}
	return servers, urls, nil
}

// The demo's nodes listen on ports below the kernel's usual ephemeral range
// (32768–60999 on Linux): a node killed and restarted on its address must not
// find it taken meanwhile by the local port of some outgoing connection (of
// this process or of another on the machine), as a port chosen by the kernel
// (":0") could be.
const demoPortMin, demoPortMax = 20000, 32000

// startBelowEphemeral starts m on a free port in [demoPortMin, demoPortMax).
func startBelowEphemeral(m *miniredis.Miniredis) error {
	var err error
	for range 100 {
		port := demoPortMin + mrand.IntN(demoPortMax-demoPortMin)
		if err = m.StartAddr(fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			return nil
		}
	}
	return err
}

// killMinority kills a minority of the nodes (locking still works), then one
// more (it is refused), then restarts them empty.
func killMinority(client *redlock.Client, tl *timeline, servers []*miniredis.Miniredis, urls []string) error {
	n := len(servers)
	down := (n - 1) / 2
	tl.section(fmt.Sprintf("2. %d of %d nodes killed: a majority is still up", down, n))
	for i := 0; i < down; i++ {
		servers[i].Close()
		tl.say("chaos", "node %d (%s) killed", i+1, urls[i])
	}
	if err := contend(client, tl, 2, 2); err != nil {
		return err
	}
	servers[down].Close()
	tl.say("chaos", "node %d killed too: no majority left", down+1)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err := client.Lock(ctx, "nightly-report")
	cancel()
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) {
		return fmt.Errorf("expected a refusal without a majority, got %v", err)
	}
	tl.say("worker-1", "refused: %d of %d nodes agreed, %d failed (need %d)", qe.Agreed, qe.Nodes, qe.Failed, qe.Need)
	for i := 0; i <= down; i++ {
		if err := servers[i].Restart(); err != nil {
			return err
		}
		servers[i].FlushAll() // restarted empty
	}
	tl.say("chaos", "nodes restarted (empty)")
	return nil
}

// pausedHolder shows a holder that pauses past its lease lose the lock.
func pausedHolder(client *redlock.Client, tl *timeline) error {
	tl.section("3. a holder pauses past its lease")
	ctx := context.Background()
	a, err := client.Lock(ctx, "ledger", redlock.WithLockTTL(200*time.Millisecond))
	if err != nil {
		return err
	}
	tl.say("worker-A", "acquired \"ledger\", valid for %v", time.Until(a.Until()).Round(time.Millisecond))
	tl.say("worker-A", "stops the world (GC pause, VM stall) for 300ms ...")
	time.Sleep(300 * time.Millisecond)
	b, err := client.Lock(ctx, "ledger")
	if err != nil {
		return err
	}
	tl.say("worker-B", "acquired \"ledger\": A's lease ran out on the nodes")
	tl.say("worker-A", "wakes up; its lease ended %v ago", time.Since(a.Until()).Round(time.Millisecond))
	if err := a.Extend(ctx); !errors.Is(err, redlock.ErrLockLost) {
		return fmt.Errorf("expected ErrLockLost for the paused holder, got %v", err)
	}
	tl.say("worker-A", "Extend: lock lost — A must not write")
	if err := b.Release(ctx); err != nil {
		return err
	}
	tl.say("worker-B", "released")
	return nil
}

// fenced shows a paused holder's late write refused by a resource that checks
// fencing tokens.
func fenced(client *redlock.Client, tl *timeline) error {
	tl.section("4. the fenced resource refuses the paused holder's stale write")
	ctx := context.Background()
	var account fence.Value[string] // the protected resource: it remembers the highest token
	// A's lease is short, so that the demo is quick; on a loaded machine it can
	// run out before the token is written back (ErrLockLost): A then tries again.
	var a *redlock.Lock
	var err error
	for try := 0; ; try++ {
		a, err = client.Lock(ctx, "account", redlock.WithLockTTL(300*time.Millisecond), redlock.WithFence())
		if err == nil {
			break
		}
		if !errors.Is(err, redlock.ErrLockLost) || try == 4 {
			return err
		}
	}
	t1, err := a.Fence(ctx)
	if err != nil {
		return err
	}
	tl.say("worker-A", "acquired \"account\" with fencing token %d", t1)
	if err := account.Store(t1, "balance=100 (by A)"); err != nil {
		return fmt.Errorf("A's first write: %w", err)
	}
	tl.say("worker-A", "writes balance=100 with token %d: accepted", t1)
	tl.say("worker-A", "stops the world for 400ms before its next write ...")
	time.Sleep(400 * time.Millisecond)
	b, err := client.Lock(ctx, "account", redlock.WithFence())
	if err != nil {
		return err
	}
	t2, err := b.Fence(ctx)
	if err != nil {
		return err
	}
	tl.say("worker-B", "acquired \"account\" with fencing token %d", t2)
	if err := account.Store(t2, "balance=150 (by B)"); err != nil {
		return fmt.Errorf("B's write: %w", err)
	}
	tl.say("worker-B", "writes balance=150 with token %d: accepted", t2)
	err = account.Store(t1, "balance=90 (by A)")
	if !errors.Is(err, fence.ErrStale) {
		return fmt.Errorf("expected the paused holder's write to be refused, got %v", err)
	}
	tl.say("worker-A", "wakes up, writes balance=90 with token %d: refused (%v)", t1, err)
	v, highest := account.Load()
	tl.say("account", "holds %q, highest token %d: B's write survived", v, highest)
	if err := b.Release(ctx); err != nil {
		return err
	}
	tl.say("worker-B", "releases \"account\"")
	_ = a.Release(ctx) // long expired: nothing left to delete
	return nil
}

// contend runs workers that each take the lock rounds times, hold it briefly and
// release it, printing each step.
func contend(client *redlock.Client, tl *timeline, workers, rounds int) error {
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	var inside sync.Mutex
	for w := 1; w <= workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			who := fmt.Sprintf("worker-%d", w)
			for r := 0; r < rounds; r++ {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				l, err := client.Lock(ctx, "nightly-report")
				if err != nil {
					cancel()
					errs <- fmt.Errorf("%s: %w", who, err)
					return
				}
				if !inside.TryLock() {
					errs <- fmt.Errorf("%s: two holders at once", who)
				}
				tl.say(who, "acquired, valid for %v", time.Until(l.Until()).Round(time.Millisecond))
				time.Sleep(5 * time.Millisecond) // the protected work
				inside.Unlock()
				err = l.Release(ctx)
				cancel()
				if err != nil {
					errs <- fmt.Errorf("%s: release: %w", who, err)
					return
				}
				tl.say(who, "released")
			}
		}()
	}
	wg.Wait()
	close(errs)
	return errors.Join(func() []error {
		var all []error
		for err := range errs {
			all = append(all, err)
		}
		return all
	}()...)
}

package rueidis

import (
	"context"
	"errors"
	"sync"
	"time"

	rd "github.com/redis/rueidis"
)

// watchLinger keeps a key subscribed this long after its last watcher left, so
// that a client contending for a key again and again does not pay a SUBSCRIBE
// (and a round trip before its next attempt) and an UNSUBSCRIBE each time, as
// the core's node and the goredis node do.
const watchLinger = 2 * time.Second

// keySub is the subscription of one key, shared by its watchers: one rueidis
// Receive, on the client's connection (on a Cluster, the one to the master of
// the key's slot), re-established after it ends. Its fields are guarded by
// Node.mu.
type keySub struct {
	watchers map[*watcher]struct{}
	ready    chan struct{} // closed while the subscription is confirmed
	isReady  bool          // ready is closed
	seen     bool          // a confirmation came already: the next ones are re-subscriptions
	linger   *time.Timer   // set while no watcher is left
	cancel   context.CancelFunc
	retiring bool          // cancelled: unsubscribing, then gone
	gone     chan struct{} // closed once the subscription ended and its key was unsubscribed
}

type watcher struct{ ch chan struct{} }

// pokeAll pokes every watcher of ks (Node.mu held).
func (ks *keySub) pokeAll() {
	for w := range ks.watchers {
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
}

// retire ends the subscription (Node.mu held).
func (ks *keySub) retire() {
	if ks.linger != nil {
		ks.linger.Stop()
		ks.linger = nil
	}
	ks.retiring = true
	ks.cancel()
}

// Watch implements node.Watcher with rueidis' Receive, which shares the
// client's connection. A key's watchers share one subscription, kept for
// watchLinger after the last one left; the key is unsubscribed when it ends.
// The channel is poked after every release notification, and whenever the
// subscription ended or was re-established (a release may have been missed
// meanwhile). Watch returns once the server confirmed the subscription (at
// once if it is already), or with ctx's error when ctx ended first (the watch
// stays registered: call stop).
func (n *Node) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	for {
		n.mu.Lock()
		if n.closed {
			n.mu.Unlock()
			return nil, nil, errors.New("rueidis: node closed")
		}
		ks := n.keys[key]
		if ks != nil && ks.retiring {
			// Its UNSUBSCRIBE is on its way: a new subscription made before
			// it is confirmed would be ended by the confirmation.
			gone := ks.gone
			n.mu.Unlock()
			select {
			case <-gone:
				continue
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		}
		if ks == nil {
			ks = n.subscribe(key)
		}
		if ks.linger != nil {
			ks.linger.Stop()
			ks.linger = nil
		}
		w := &watcher{ch: make(chan struct{}, 1)}
		ks.watchers[w] = struct{}{}
		ready := ks.ready
		n.mu.Unlock()

		var once sync.Once
		stop := func() { once.Do(func() { n.unwatch(key, ks, w) }) }
		select {
		case <-ready:
			return w.ch, stop, nil
		case <-ctx.Done():
			return w.ch, stop, ctx.Err()
		}
	}
}

// subscribe starts the subscription of key (n.mu held).
func (n *Node) subscribe(key string) *keySub {
	ctx, cancel := context.WithCancel(context.Background())
	ks := &keySub{watchers: map[*watcher]struct{}{}, ready: make(chan struct{}), cancel: cancel, gone: make(chan struct{})}
	n.keys[key] = ks
	go n.receive(ctx, key, ks)
	return ks
}

// unwatch removes w from key's watchers; the last one leaving starts the
// linger, after which the subscription ends.
func (n *Node) unwatch(key string, ks *keySub, w *watcher) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(ks.watchers, w)
	if len(ks.watchers) > 0 || n.keys[key] != ks || ks.linger != nil || ks.retiring {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(watchLinger, func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if ks.linger != t || n.keys[key] != ks {
			return // watched again meanwhile, or closed
		}
		ks.linger = nil
		ks.retire()
	})
	ks.linger = t
}

// receive keeps key subscribed until ctx ends, then unsubscribes it.
func (n *Node) receive(ctx context.Context, key string, ks *keySub) {
	defer func() {
		n.mu.Lock()
		if n.keys[key] == ks {
			delete(n.keys, key)
		}
		n.mu.Unlock()
		close(ks.gone)
	}()
	hctx := rd.WithOnSubscriptionHook(ctx, func(s rd.PubSubSubscription) {
		if s.Kind != "subscribe" {
			return
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		if !ks.isReady {
			ks.isReady = true
			close(ks.ready)
		}
		if ks.seen {
			ks.pokeAll() // re-subscribed: a release may have been missed
		}
		ks.seen = true
	})
	// Receive leaves the channel subscribed when it returns: unsubscribe it
	// on the same connection once the subscription is no longer wanted.
	hctx = rd.WithOnReceiveReturnHook(hctx, func(err error, c rd.CommandClient) error {
		if ctx.Err() != nil {
			uctx, cancel := context.WithTimeout(context.Background(), n.timeout)
			defer cancel()
			_ = c.Do(uctx, c.B().Unsubscribe().Channel(key).Build()).Error()
		}
		return err
	})
	for backoff := 50 * time.Millisecond; ctx.Err() == nil; backoff = min(2*backoff, 2*time.Second) {
		// On a Cluster, subscribe on the master of the channel's slot (the
		// lock key's: the channels carry its hash tag), where the scripts
		// PUBLISH: a waiter listening elsewhere would miss its wake-ups.
		sub := n.c.B().Subscribe().Channel(key).Build().SetSlot(key)
		_ = n.c.Receive(hctx, sub, func(rd.PubSubMessage) {
			n.mu.Lock()
			ks.pokeAll()
			n.mu.Unlock()
		})
		if ctx.Err() != nil {
			return
		}
		// The subscription ended: a release may be missed until it is back.
		n.mu.Lock()
		if ks.isReady {
			ks.isReady = false
			ks.ready = make(chan struct{})
		}
		ks.pokeAll()
		n.mu.Unlock()
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
		}
	}
}

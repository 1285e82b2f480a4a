package goredis

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// watchLinger keeps a key subscribed this long after its last watcher left, so
// that a client contending for a key again and again does not pay a SUBSCRIBE
// and an UNSUBSCRIBE each time (as the core's node does).
const watchLinger = 2 * time.Second

// subscriber multiplexes every watch of one node over one go-redis PubSub (one
// connection, re-established and re-subscribed by go-redis).
type subscriber struct {
	c       redis.UniversalClient
	timeout time.Duration

	mu     sync.Mutex
	ps     *redis.PubSub // nil until the first watch
	keys   map[string]*keyWatch
	closed bool
}

type keyWatch struct {
	watchers  map[*watcher]struct{}
	confirmed chan struct{} // closed at the first subscribe confirmation
	done      bool          // confirmed is closed
	linger    *time.Timer   // set while no watcher is left
}

type watcher struct{ ch chan struct{} }

func (w *watcher) poke() {
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

func newSubscriber(c redis.UniversalClient, timeout time.Duration) *subscriber {
	return &subscriber{c: c, timeout: timeout, keys: map[string]*keyWatch{}}
}

// Watch implements node.Watcher over one shared PubSub. The channel is poked
// after every release notification, and after go-redis re-subscribed (a
// release may have been missed meanwhile). Watch returns once the server
// confirmed the subscription, or with ctx's error when ctx ended first (the
// watch stays registered: call stop).
//
// On a ClusterClient the watch goes to the master of key's slot, on a PubSub
// of that master's: a release's PUBLISH there counts the listeners connected
// to that master only, and a waiter listening elsewhere would miss its
// wake-ups.
func (n *Node) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	s, err := n.subscriberFor(ctx, key)
	if err != nil {
		return nil, nil, err
	}
	return s.watch(ctx, key)
}

// subscriberFor returns the subscriber that watches key: the node's, or on a
// ClusterClient the one of the master of key's slot.
func (n *Node) subscriberFor(ctx context.Context, key string) (*subscriber, error) {
	cc, ok := n.c.(*redis.ClusterClient)
	if !ok {
		return n.sub, nil
	}
	m, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return nil, err
	}
	addr := m.Options().Addr
	n.subsMu.Lock()
	defer n.subsMu.Unlock()
	if n.closed {
		return nil, errors.New("goredis: node closed")
	}
	s := n.subs[addr]
	if s == nil {
		if n.subs == nil {
			n.subs = map[string]*subscriber{}
		}
		s = newSubscriber(m, n.timeout)
		n.subs[addr] = s
	}
	return s, nil
}

func (s *subscriber) watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	w := &watcher{ch: make(chan struct{}, 1)}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, nil, errors.New("goredis: node closed")
	}
	kw := s.keys[key]
	if kw == nil {
		kw = &keyWatch{watchers: map[*watcher]struct{}{}, confirmed: make(chan struct{})}
		s.keys[key] = kw
		if s.ps == nil {
			// The first key picks the connection's server (on a
			// ClusterClient, every key of this subscriber is on one master:
			// Node.subscriberFor).
			s.ps = s.c.Subscribe(ctx, key)
			go s.run(s.ps.ChannelWithSubscriptions())
		} else {
			// Under s.mu, so that SUBSCRIBE and UNSUBSCRIBE of a key keep their
			// order. A failed write is retried by go-redis on reconnection.
			_ = s.ps.Subscribe(ctx, key)
		}
	}
	if kw.linger != nil {
		kw.linger.Stop()
		kw.linger = nil
	}
	kw.watchers[w] = struct{}{}
	confirmed := kw.confirmed
	s.mu.Unlock()

	var once sync.Once
	stop := func() { once.Do(func() { s.unwatch(key, kw, w) }) }
	select {
	case <-confirmed:
		return w.ch, stop, nil
	case <-ctx.Done():
		return w.ch, stop, ctx.Err()
	}
}

func (s *subscriber) unwatch(key string, kw *keyWatch, w *watcher) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(kw.watchers, w)
	if len(kw.watchers) > 0 || s.keys[key] != kw || kw.linger != nil {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(watchLinger, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if kw.linger != t || s.keys[key] != kw || s.closed {
			return // watched again meanwhile, or closed
		}
		delete(s.keys, key)
		ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
		defer cancel()
		_ = s.ps.Unsubscribe(ctx, key)
	})
	kw.linger = t
}

// run dispatches what the PubSub receives until it is closed.
func (s *subscriber) run(msgs <-chan any) {
	for m := range msgs {
		var key string
		confirm := false
		switch m := m.(type) {
		case *redis.Message:
			key = m.Channel
		case *redis.Subscription:
			if m.Kind != "subscribe" {
				continue
			}
			key, confirm = m.Channel, true
		default:
			continue
		}
		s.mu.Lock()
		if kw := s.keys[key]; kw != nil {
			if confirm && !kw.done {
				kw.done = true
				close(kw.confirmed) // the first confirmation: nothing was missed
			} else {
				for w := range kw.watchers {
					w.poke()
				}
			}
		}
		s.mu.Unlock()
	}
}

func (s *subscriber) close() {
	s.mu.Lock()
	s.closed = true
	ps := s.ps
	for _, kw := range s.keys {
		if kw.linger != nil {
			kw.linger.Stop()
		}
	}
	s.mu.Unlock()
	if ps != nil {
		_ = ps.Close()
	}
}

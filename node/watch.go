package node

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Watcher is implemented by nodes that can tell waiters that a lock key became
// free. The release script publishes on a channel named like the lock key.
type Watcher interface {
	// Watch subscribes to key's release notifications. The returned channel
	// receives a value (coalesced) after every release, and also after the
	// subscription had to be re-established (a release may have been missed).
	// Watch returns once the node confirmed the subscription or ctx ended; in the
	// latter case notifications may still come later. stop ends the watch.
	Watch(ctx context.Context, key string) (notify <-chan struct{}, stop func(), err error)
}

var _ Watcher = (*Redis)(nil)

const (
	watchPing    = 5 * time.Second  // keep-alive of the subscriber connection
	watchSilence = 12 * time.Second // no reply for this long: reconnect
	// watchLinger keeps a key subscribed this long after its last watcher left,
	// so that a client contending for a key again and again does not pay a
	// SUBSCRIBE and an UNSUBSCRIBE round trip each time.
	watchLinger = 2 * time.Second
)

// subscriber multiplexes every watch of one node over one connection.
type subscriber struct {
	dial func(context.Context) (redis.Conn, error)

	mu        sync.Mutex
	conn      redis.Conn // nil while disconnected
	watches   map[string]map[*watch]struct{}
	confirmed map[string]chan struct{} // closed when SUBSCRIBE is acknowledged
	linger    map[string]*time.Timer   // keys without watchers, unsubscribed when it fires
	running   bool
	closed    bool
	done      chan struct{} // closed when the run loop exits
	stopRun   context.CancelFunc
}

type watch struct{ ch chan struct{} }

func (w *watch) poke() {
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// Watch implements Watcher.
func (r *Redis) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	s := r.sub
	w := &watch{ch: make(chan struct{}, 1)}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, nil, errors.New("node: closed")
	}
	if !s.running {
		s.running = true
		runCtx, cancel := context.WithCancel(context.Background())
		s.stopRun, s.done = cancel, make(chan struct{})
		go s.run(runCtx)
	}
	if t := s.linger[key]; t != nil {
		t.Stop()
		delete(s.linger, key)
	}
	set := s.watches[key]
	if set == nil {
		set = map[*watch]struct{}{}
		s.watches[key] = set
		s.confirmed[key] = make(chan struct{})
		s.sendLocked("SUBSCRIBE", key)
	}
	set[w] = struct{}{}
	confirmed := s.confirmed[key]
	s.mu.Unlock()

	stop := func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		set := s.watches[key]
		if set == nil {
			return
		}
		delete(set, w)
		if len(set) > 0 || s.linger[key] != nil {
			return
		}
		var t *time.Timer
		t = time.AfterFunc(watchLinger, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.linger[key] != t || len(s.watches[key]) > 0 {
				return // watched again meanwhile
			}
			delete(s.linger, key)
			delete(s.watches, key)
			delete(s.confirmed, key)
			s.sendLocked("UNSUBSCRIBE", key)
		})
		s.linger[key] = t
	}
	select {
	case <-confirmed:
		return w.ch, stop, nil
	case <-ctx.Done():
		return w.ch, stop, ctx.Err()
	}
}

// sendLocked writes a command on the subscriber connection if there is one; a
// reconnect re-subscribes from the watch set anyway. s.mu must be held.
func (s *subscriber) sendLocked(cmd string, args ...any) {
	if s.conn == nil {
		return
	}
	if err := s.conn.Send(cmd, args...); err == nil {
		err = s.conn.Flush()
	}
}

// run keeps a subscriber connection up while the node is open.
func (s *subscriber) run(ctx context.Context) {
	defer close(s.done)
	backoff := 10 * time.Millisecond
	for ctx.Err() == nil {
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		c, err := s.dial(dctx)
		cancel()
		if err == nil {
			backoff = 10 * time.Millisecond
			s.serve(ctx, c)
		}
		// Waiters may have missed a release while disconnected: wake them.
		s.mu.Lock()
		for key, set := range s.watches {
			for w := range set {
				w.poke()
			}
			s.confirmed[key] = make(chan struct{})
		}
		s.mu.Unlock()
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		backoff = min(2*backoff, time.Second)
	}
}

// serve subscribes every watched key on c and dispatches messages until c fails
// or ctx ends.
func (s *subscriber) serve(ctx context.Context, c redis.Conn) {
	s.mu.Lock()
	s.conn = c
	for key := range s.watches {
		s.sendLocked("SUBSCRIBE", key)
	}
	s.mu.Unlock()
	stopPing := make(chan struct{})
	go func() {
		t := time.NewTicker(watchPing)
		defer t.Stop()
		for {
			select {
			case <-stopPing:
				return
			case <-ctx.Done():
				_ = c.Close() // unblocks the receive below
				return
			case <-t.C:
				s.mu.Lock()
				s.sendLocked("PING")
				s.mu.Unlock()
			}
		}
	}()
	defer func() {
		close(stopPing)
		s.mu.Lock()
		s.conn = nil
		s.mu.Unlock()
		_ = c.Close()
		_ = recover() // a reply the parser could not take: the connection is dropped
	}()
	psc := redis.PubSubConn{Conn: c}
	for {
		switch m := psc.ReceiveWithTimeout(watchSilence).(type) {
		case redis.Message:
			s.mu.Lock()
			for w := range s.watches[m.Channel] {
				w.poke()
			}
			s.mu.Unlock()
		case redis.Subscription:
			if m.Kind == "subscribe" {
				s.mu.Lock()
				if ch, ok := s.confirmed[m.Channel]; ok {
					select {
					case <-ch:
					default:
						close(ch)
					}
				}
				s.mu.Unlock()
			}
		case error:
			return
		}
	}
}

func newSubscriber(dial func(context.Context) (redis.Conn, error)) *subscriber {
	return &subscriber{dial: dial, watches: map[string]map[*watch]struct{}{},
		confirmed: map[string]chan struct{}{}, linger: map[string]*time.Timer{}}
}

// close stops the subscriber and waits for it.
func (s *subscriber) close() {
	s.mu.Lock()
	s.closed = true
	for _, t := range s.linger {
		t.Stop()
	}
	running, stop, done := s.running, s.stopRun, s.done
	s.mu.Unlock()
	if running {
		stop()
		<-done
	}
}

package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
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
	// Watch returns once the node confirmed the subscription, or failed to (the
	// node is unreachable or refuses SUBSCRIBE: the error says why), or ctx
	// ended; in the latter cases notifications may still come later, once a
	// subscription succeeds, so callers poll meanwhile. stop ends the watch.
	Watch(ctx context.Context, key string) (notify <-chan struct{}, stop func(), err error)
}

// Variables for the tests' sake.
var (
	// watchPing is the keep-alive period of the subscriber connection; an idle
	// subscriber closes its connection at the first keep-alive that finds no key
	// watched.
	watchPing = 5 * time.Second
	// watchLinger keeps a key subscribed this long after its last watcher left,
	// so that a client contending for a key again and again does not pay a
	// SUBSCRIBE and an UNSUBSCRIBE round trip each time.
	watchLinger = 2 * time.Second
)

const (
	watchSilence = 12 * time.Second // no reply for this long: reconnect
	// Reconnection backoff of the subscriber after a failed dial or a refused
	// SUBSCRIBE: exponential from watchBackoffMin, capped at watchBackoffMax,
	// with jitter; it is reset only once a subscription has been confirmed.
	watchBackoffMin = 50 * time.Millisecond
	watchBackoffMax = 10 * time.Second
)

// subscriber multiplexes every watch of one node over one connection. It runs
// only while some key is watched (or lingers): an idle subscriber closes its
// connection.
type subscriber struct {
	dial func(context.Context) (redis.Conn, error)
	name string
	log  *slog.Logger // nil: no logs

	mu        sync.Mutex
	conn      redis.Conn    // nil while disconnected
	queue     [][]any       // commands for conn, written by its keep-alive goroutine
	kick      chan struct{} // wakes that goroutine (capacity 1)
	watches   map[string]map[*watch]struct{}
	confirmed map[string]*confirm    // settled when SUBSCRIBE is acknowledged or fails
	linger    map[string]*time.Timer // keys without watchers, unsubscribed when it fires
	failing   error                  // why the last attempt failed; nil once a subscription is confirmed
	reported  bool                   // failing was logged
	running   bool
	closed    bool
	stopRun   context.CancelFunc
	wg        sync.WaitGroup // the run loop
}

// confirm is the outcome of one key's SUBSCRIBE on one connection.
type confirm struct {
	done chan struct{}
	err  error // set before done is closed
}

func newConfirm() *confirm { return &confirm{done: make(chan struct{})} }

// settle records the outcome, once. s.mu must be held.
func (c *confirm) settle(err error) {
	select {
	case <-c.done:
	default:
		c.err = err
		close(c.done)
	}
}

type watch struct{ ch chan struct{} }

func (w *watch) poke() {
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// Watch implements Watcher. When notifications are unavailable (the node is
// down, or refuses SUBSCRIBE), Watch returns the reason at once, without waiting
// for ctx, and keeps the watch registered: notifications resume once the
// subscriber reconnects, which it retries with a capped exponential backoff.
// Callers should also poll (the lock client backs off and retries anyway).
func (r *Redis) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	s := r.sub
	w := &watch{ch: make(chan struct{}, 1)}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, nil, errors.New("node: closed")
	}
	s.startLocked()
	if t := s.linger[key]; t != nil {
		t.Stop()
		delete(s.linger, key)
	}
	set := s.watches[key]
	if set == nil {
		set = map[*watch]struct{}{}
		s.watches[key] = set
		s.confirmed[key] = newConfirm()
		s.sendLocked("SUBSCRIBE", key)
	}
	set[w] = struct{}{}
	cf, failing := s.confirmed[key], s.failing
	s.mu.Unlock()

	stop := func() { s.unwatch(key, w) }
	if failing != nil {
		select {
		case <-cf.done:
		default:
			return w.ch, stop, fmt.Errorf("node: release notifications unavailable: %w", failing)
		}
	}
	select {
	case <-cf.done:
		if cf.err != nil {
			return w.ch, stop, fmt.Errorf("node: release notifications unavailable: %w", cf.err)
		}
		return w.ch, stop, nil
	case <-ctx.Done():
		return w.ch, stop, ctx.Err()
	}
}

// startLocked starts the run loop if it is not running. s.mu must be held.
func (s *subscriber) startLocked() {
	if s.running {
		return
	}
	s.running = true
	ctx, cancel := context.WithCancel(context.Background())
	s.stopRun = cancel
	s.wg.Add(1)
	go s.run(ctx)
}

// unwatch ends watch w of key; the key stays subscribed for watchLinger.
func (s *subscriber) unwatch(key string, w *watch) {
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

// sendLocked queues a command for the subscriber connection if there is one (a
// reconnect re-subscribes from the watch set anyway). The connection's
// keep-alive goroutine writes it, so that no caller waits on the network while
// holding s.mu. s.mu must be held.
func (s *subscriber) sendLocked(cmd string, args ...any) {
	if s.conn == nil {
		return
	}
	s.queue = append(s.queue, append([]any{cmd}, args...))
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// flushQueue writes the queued commands on c; a failed write closes c, which
// ends its receive loop.
func (s *subscriber) flushQueue(c redis.Conn) {
	s.mu.Lock()
	q := s.queue
	s.queue = nil
	s.mu.Unlock()
	for _, cmd := range q {
		if err := c.Send(cmd[0].(string), cmd[1:]...); err != nil {
			_ = c.Close()
			return
		}
	}
	if err := c.Flush(); err != nil {
		_ = c.Close()
	}
}

// run keeps a subscriber connection up while some key is watched.
func (s *subscriber) run(ctx context.Context) {
	defer s.wg.Done()
	backoff := watchBackoffMin
	for !s.idleStop() {
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		c, err := s.dial(dctx)
		cancel()
		confirmed := false
		if err == nil {
			confirmed, err = s.serve(ctx, c)
		}
		if ctx.Err() != nil {
			return
		}
		var refused redis.Error
		if confirmed && !errors.As(err, &refused) {
			// A subscription worked: back to quick reconnects. Not when the node
			// refused a SUBSCRIBE (an ACL that allows some channels only): that
			// would fail again at once.
			backoff = watchBackoffMin
		}
		s.disconnected(err)
		if err == nil {
			continue // closed for being idle
		}
		t := time.NewTimer(backoff/2 + rand.N(backoff/2+1))
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		backoff = min(2*backoff, watchBackoffMax)
	}
}

// idleStop stops the run loop when nothing is watched, and reports whether it did.
func (s *subscriber) idleStop() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.watches) > 0 && !s.closed {
		return false
	}
	s.running = false
	return true
}

// disconnected records the end of a connection (err nil: closed for being
// idle). Waiters may have missed a release meanwhile, so they are woken;
// waiters of a confirmation get the error. A failure is logged once, until a
// subscription is confirmed again.
func (s *subscriber) disconnected(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conn, s.queue = nil, nil
	for key, set := range s.watches {
		for w := range set {
			w.poke()
		}
		cf := s.confirmed[key]
		if err != nil {
			cf.settle(err)
		}
		select {
		case <-cf.done: // the next connection confirms anew
			s.confirmed[key] = newConfirm()
		default: // still waited for: the next connection settles it
		}
	}
	if err == nil {
		return
	}
	s.failing = err
	if !s.reported && s.log != nil {
		s.log.Warn("redlock: release notifications unavailable, waiters poll; retrying with backoff",
			"node", s.name, "err", err)
	}
	s.reported = true
}

// serve subscribes every watched key on c and dispatches messages until c fails,
// ctx ends, or nothing has been watched for a keep-alive period (err nil). It
// reports whether a subscription was confirmed on c.
func (s *subscriber) serve(ctx context.Context, c redis.Conn) (confirmed bool, err error) {
	s.mu.Lock()
	s.conn, s.queue, s.kick = c, nil, make(chan struct{}, 1)
	kick := s.kick
	for key := range s.watches {
		s.sendLocked("SUBSCRIBE", key)
	}
	s.mu.Unlock()
	idle := make(chan struct{})
	stopPing := s.keepAlive(ctx, c, kick, idle)
	defer func() {
		stopPing()
		_ = c.Close()
		if p := recover(); p != nil { // a reply the parser could not take
			err = fmt.Errorf("node: subscriber: reading a reply panicked: %v (%w)", p, ErrMalformedReply)
		}
	}()
	for {
		v, err := redis.ReceiveWithTimeout(c, watchSilence)
		if err != nil {
			select {
			case <-idle:
				return confirmed, nil
			default:
			}
			if e, ok := err.(redis.Error); ok {
				return confirmed, fmt.Errorf("node: SUBSCRIBE refused: %w", e)
			}
			return confirmed, fmt.Errorf("node: subscriber connection: %w", err)
		}
		if s.dispatch(v) {
			confirmed = true
		}
	}
}

// keepAlive writes the commands queued for c when kicked, pings c every
// watchPing while keys are watched, and closes it (after closing idle) when none
// is, or when ctx ends. The returned func stops it.
func (s *subscriber) keepAlive(ctx context.Context, c redis.Conn, kick, idle chan struct{}) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(watchPing)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-ctx.Done():
				_ = c.Close() // unblocks the receive
				return
			case <-kick:
				s.flushQueue(c)
			case <-t.C:
				s.mu.Lock()
				none := len(s.watches) == 0
				if !none {
					s.sendLocked("PING")
				}
				s.mu.Unlock()
				if none {
					close(idle)
					_ = c.Close()
					return
				}
			}
		}
	}()
	return func() { close(quit); <-done }
}

// dispatch handles one reply on the subscriber connection, and reports whether
// it confirmed a subscription. Replies that are neither messages nor
// confirmations (a pong, in or out of subscribe mode) are ignored.
func (s *subscriber) dispatch(v any) bool {
	vals, ok := v.([]any)
	if !ok || len(vals) < 2 {
		return false
	}
	kind, _ := redis.String(vals[0], nil)
	channel, _ := redis.String(vals[1], nil)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch kind {
	case "message":
		for w := range s.watches[channel] {
			w.poke()
		}
	case "subscribe":
		if cf, ok := s.confirmed[channel]; ok {
			cf.settle(nil)
		}
		if s.reported && s.log != nil {
			s.log.Info("redlock: release notifications restored", "node", s.name)
		}
		s.failing, s.reported = nil, false
		return true
	}
	return false
}

func newSubscriber(dial func(context.Context) (redis.Conn, error), name string, log *slog.Logger) *subscriber {
	return &subscriber{dial: dial, name: name, log: log, watches: map[string]map[*watch]struct{}{},
		confirmed: map[string]*confirm{}, linger: map[string]*time.Timer{}}
}

// close stops the subscriber and waits for it.
func (s *subscriber) close() {
	s.mu.Lock()
	s.closed = true
	for _, t := range s.linger {
		t.Stop()
	}
	if s.running {
		s.stopRun()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

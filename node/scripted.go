package node

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"
)

// Call is one run of a script: the script, its keys and its arguments, as
// every backend sends them (EVALSHA Script.Hash, EVAL Script.Source on
// NOSCRIPT). Arguments are strings or int64s.
type Call struct {
	Script Script
	Keys   []string
	Args   []any
}

// Evaler runs script calls on one Redis instance: the one thing a backend
// built on another Redis client (the goredis and rueidis adapter modules)
// must do for Scripted to give it every lock operation.
type Evaler interface {
	// Eval runs c, by SHA-1 and by source when the server answers NOSCRIPT,
	// bounded by ctx, and returns the reply: integers as int64, bulk strings
	// as string or []byte, arrays as []any of those, a nil reply as nil.
	Eval(ctx context.Context, c Call) (any, error)
}

// Scripted implements every script operation of a lock node (Acquire,
// Release, Extend, the fence writes, the waiters' queue of Queuer) over an Evaler, so that every
// backend runs exactly the same scripts with the same arguments, and every
// script that can grant a lock (Script.Grants) passes the same guards. A
// backend embeds it and adds Name, Close, Watch and Ping.
type Scripted struct {
	// Evaler runs the calls.
	Evaler Evaler
	// Refusal, if set, is asked before a script that can grant a lock is
	// sent: an error refuses the call, and nothing is sent (the restart
	// quarantine: RestartGuard.Refusal).
	Refusal func() error
	// Granted, if set, is asked after such a script granted the lock: an
	// error means the grant went to a process that must not grant (the call
	// itself dialed and found it restarted); the lock is released again and
	// the error returned.
	Granted func() error
	// Timeout bounds the release that takes such a grant back (default
	// DefaultTimeout).
	Timeout time.Duration
}

// callBufKxA hold a Call's keys and arguments in one allocation (the calls
// of every lock operation are built per node and per call).
type (
	callBuf1x2 struct {
		keys [1]string
		args [2]any
	}
	callBuf2x2 struct {
		keys [2]string
		args [2]any
	}
	callBuf2x3 struct {
		keys [2]string
		args [3]any
	}
	callBuf4x3 struct {
		keys [4]string
		args [3]any
	}
)

// msArg returns d in milliseconds as a call argument: boxed once for the
// TTLs in use (boxing an int64 above 255 allocates, and most clients use
// one TTL for every lock), from a small direct-mapped cache.
func msArg(d time.Duration) any {
	n := d.Milliseconds()
	slot := &msArgs[uint64(n)*0x9E3779B97F4A7C15>>(64-msArgBits)]
	if b := slot.Load(); b != nil && b.n == n {
		return b.v
	}
	b := &boxedInt{n: n, v: n}
	slot.Store(b)
	return b.v
}

const msArgBits = 3

var msArgs [1 << msArgBits]atomic.Pointer[boxedInt]

type boxedInt struct {
	n int64
	v any // n
}

// AcquireCall is Acquire's call: KEYS lock, fence; ARGV token, TTL ms, "1"
// to read the counter. With fenceKey "" the counter is not read (KEYS[2] is
// then the lock key again, which keeps the call in one hash slot).
func AcquireCall(key, fenceKey, token string, ttl time.Duration) Call {
	read := readCounter
	if fenceKey == "" {
		fenceKey, read = key, skipCounter
	}
	b := &callBuf2x3{[2]string{key, fenceKey}, [3]any{token, msArg(ttl), read}}
	return Call{AcquireScript, b.keys[:], b.args[:]}
}

// AcquireScript's ARGV[3], boxed once.
var readCounter, skipCounter any = "1", "0"

// ReadFenceCall is ReadFence's call.
func ReadFenceCall(key, fenceKey, token string) Call {
	b := &callBuf2x2{[2]string{key, fenceKey}, [2]any{token}}
	return Call{ReadFenceScript, b.keys[:], b.args[:1]}
}

// ReleaseCall is Release's call.
func ReleaseCall(key, token string, notify bool) Call {
	n := "0"
	if notify {
		n = "1"
	}
	b := &callBuf1x2{[1]string{key}, [2]any{token, n}}
	return Call{ReleaseScript, b.keys[:], b.args[:]}
}

// ExtendCall is Extend's call: KEYS lock, its metadata key (MetaKey),
// renewed with it.
func ExtendCall(key, token string, ttl time.Duration) Call {
	b := &callBuf2x2{[2]string{key, MetaKey(key)}, [2]any{token, msArg(ttl)}}
	return Call{ExtendScript, b.keys[:], b.args[:]}
}

// WriteFenceCall is WriteFence's call.
func WriteFenceCall(key, fenceKey, token string, fence uint64) Call {
	return Call{WriteFenceScript, []string{key, fenceKey}, []any{token, strconv.FormatUint(fence, 10)}}
}

// RaiseFenceCall is RaiseFence's call.
func RaiseFenceCall(fenceKey string, fence uint64) Call {
	return Call{RaiseFenceScript, []string{fenceKey}, []any{strconv.FormatUint(fence, 10)}}
}

// CreateFenceCall is CreateFence's call.
func CreateFenceCall(key, fenceKey, token string, fence uint64) Call {
	return Call{CreateFenceScript, []string{key, fenceKey}, []any{token, strconv.FormatUint(fence, 10)}}
}

// AcquireFairCall is Queuer.AcquireFair's call.
func AcquireFairCall(key, fenceKey, token string, ttl time.Duration, w Waiter) Call {
	if fenceKey == "" {
		fenceKey = key // the counter is not read (fairacquire.lua)
	}
	q, qx, qm := queueKeys(key)
	return Call{Script{fairAcquireScript}, []string{key, fenceKey, q, qx, qm},
		[]any{token, ttl.Milliseconds(), w.ID, w.Ticket, max(w.Lease.Milliseconds(), 1)}}
}

// ReleaseFairCall is Queuer.ReleaseFair's call.
func ReleaseFairCall(key, token, waiter string, tell bool) Call {
	q, qx, qm := queueKeys(key)
	b := &callBuf4x3{[4]string{key, q, qx, qm}, [3]any{token, waiter, tellArg(tell)}}
	return Call{Script{fairReleaseScript}, b.keys[:], b.args[:]}
}

// tellArg is fairrelease.lua's ARGV[3]: whether the key's own channel has
// listeners to tell when nobody is queued.
func tellArg(tell bool) any {
	if tell {
		return readCounter // "1"
	}
	return skipCounter // "0"
}

// LeaveQueueCall is Queuer.LeaveQueue's call.
func LeaveQueueCall(key, id string) Call {
	q, qx := QueueKeys(key)
	return Call{Script{fairLeaveScript}, []string{key, q, qx}, []any{id}}
}

var _ Queuer = (*Scripted)(nil)

// run runs c, behind the guards when its script can grant a lock.
func (s *Scripted) run(ctx context.Context, c Call) (any, error) { return s.runArgv(ctx, c, nil) }

// runArgv is run; argv, if set, is c's EVALSHA arguments laid out already
// (LockArgs), which a Redis node sends as they are.
func (s *Scripted) runArgv(ctx context.Context, c Call, argv []any) (any, error) {
	if c.Script.Grants() && s.Refusal != nil {
		if err := s.Refusal(); err != nil {
			return nil, err
		}
	}
	if e, ok := s.Evaler.(redisEvaler); ok && argv != nil {
		return e.evalArgv(ctx, c.Script.s, argv)
	}
	return s.Evaler.Eval(ctx, c)
}

// acquire runs an acquisition call and reads its reply; a grant that Granted
// refuses is taken back.
func (s *Scripted) acquire(ctx context.Context, c Call) (Acquired, error) {
	return s.acquireArgv(ctx, c, nil)
}

// acquireArgv is acquire with c's EVALSHA arguments argv (runArgv).
func (s *Scripted) acquireArgv(ctx context.Context, c Call, argv []any) (Acquired, error) {
	reply, err := s.runArgv(ctx, c, argv)
	if err != nil {
		return Acquired{}, err
	}
	a, err := ParseAcquiredReply(reply)
	if err != nil || !a.OK || s.Granted == nil {
		return a, err
	}
	if err := s.Granted(); err != nil {
		d := s.Timeout
		if d <= 0 {
			d = DefaultTimeout
		}
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
		defer cancel()
		_, _ = s.flag(uctx, ReleaseCall(c.Keys[0], c.Args[0].(string), false))
		return Acquired{}, err
	}
	return a, nil
}

// flag runs a call whose reply is 0 or 1.
func (s *Scripted) flag(ctx context.Context, c Call) (bool, error) {
	n, err := s.intArgv(ctx, c, nil)
	return n == 1, err
}

// intArgv runs a call whose reply is an integer (runArgv).
func (s *Scripted) intArgv(ctx context.Context, c Call, argv []any) (int64, error) {
	reply, err := s.runArgv(ctx, c, argv)
	if err != nil {
		return 0, err
	}
	n, ok := reply.(int64)
	if !ok {
		return 0, fmt.Errorf("%w: %s: %v", ErrUnexpectedReply, c.Script.Name(), reply)
	}
	return n, nil
}

// Acquire implements Node.
func (s *Scripted) Acquire(ctx context.Context, key, fenceKey, token string, ttl time.Duration) (Acquired, error) {
	return s.acquire(ctx, AcquireCall(key, fenceKey, token, ttl))
}

// ReadFence implements Node.
func (s *Scripted) ReadFence(ctx context.Context, key, fenceKey, token string) (Acquired, error) {
	reply, err := s.run(ctx, ReadFenceCall(key, fenceKey, token))
	if err != nil {
		return Acquired{}, err
	}
	a, err := ParseAcquiredReply(reply)
	if err == nil && len(reply.([]any)) != 3 {
		err = fmt.Errorf("%w: readfence: %v", ErrUnexpectedReply, reply)
	}
	return a, err
}

// Release implements Node.
func (s *Scripted) Release(ctx context.Context, key, token string, notify bool) (bool, error) {
	return s.flag(ctx, ReleaseCall(key, token, notify))
}

// Extend implements Node.
func (s *Scripted) Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	return s.flag(ctx, ExtendCall(key, token, ttl))
}

// WriteFence implements Node.
func (s *Scripted) WriteFence(ctx context.Context, key, fenceKey, token string, fence uint64) (bool, error) {
	return s.flag(ctx, WriteFenceCall(key, fenceKey, token, fence))
}

// RaiseFence implements Node.
func (s *Scripted) RaiseFence(ctx context.Context, fenceKey string, fence uint64) error {
	_, err := s.flag(ctx, RaiseFenceCall(fenceKey, fence))
	return err
}

// CreateFence implements Node.
func (s *Scripted) CreateFence(ctx context.Context, key, fenceKey, token string, fence uint64) (held, existed bool, err error) {
	c := CreateFenceCall(key, fenceKey, token, fence)
	reply, err := s.run(ctx, c)
	if err != nil {
		return false, false, err
	}
	n, ok := reply.(int64)
	if !ok || n < -1 || n > 1 {
		return false, false, fmt.Errorf("%w: %s: %v", ErrUnexpectedReply, c.Script.Name(), reply)
	}
	return n == 1, n == -1, nil
}

// AcquireFair implements Queuer.
func (s *Scripted) AcquireFair(ctx context.Context, key, fenceKey, token string, ttl time.Duration, w Waiter) (Acquired, error) {
	return s.acquire(ctx, AcquireFairCall(key, fenceKey, token, ttl, w))
}

// ReleaseFair implements Queuer.
func (s *Scripted) ReleaseFair(ctx context.Context, key, token, waiter string, tell bool) (released, queued bool, err error) {
	return releaseFairReply(s.intArgv(ctx, ReleaseFairCall(key, token, waiter, tell), nil))
}

// releaseFairReply reads fairrelease.lua's reply: 1 if deleted, plus 2
// when waiters were queued.
func releaseFairReply(n int64, err error) (released, queued bool, _ error) {
	if err != nil {
		return false, false, err
	}
	return n&1 == 1, n&2 == 2, nil
}

// LeaveQueue implements Queuer.
func (s *Scripted) LeaveQueue(ctx context.Context, key, id string) error {
	_, err := s.flag(ctx, LeaveQueueCall(key, id))
	return err
}

// ParseAcquiredReply reads the reply of an acquisition script as an Evaler
// returns it: an array of 3 elements (ok, fence counter, counter present)
// or 6 (then waiters ahead, the node's clock in µs, and what the node did
// with a waiter: 1 queued, 0 ticket refused, -1 not queued).
func ParseAcquiredReply(reply any) (Acquired, error) {
	vals, ok := reply.([]any)
	if !ok || (len(vals) != 3 && len(vals) != 6) {
		return Acquired{}, fmt.Errorf("%w: acquire: %v", ErrUnexpectedReply, reply)
	}
	var ints [6]int64
	for i, v := range vals {
		if i == 1 {
			continue
		}
		n, ok := v.(int64)
		if !ok {
			return Acquired{}, fmt.Errorf("%w: acquire: %v", ErrUnexpectedReply, reply)
		}
		ints[i] = n
	}
	var a Acquired
	var err error
	switch f := vals[1].(type) {
	case string:
		a, err = ParseAcquired(ints[0], f, ints[2])
	case []byte:
		a, err = ParseAcquired(ints[0], string(f), ints[2]) // not kept: no copy
	default:
		return Acquired{}, fmt.Errorf("%w: acquire: %v", ErrUnexpectedReply, reply)
	}
	if err != nil || len(vals) == 3 {
		return a, err
	}
	if ints[3] < 0 || ints[4] < 0 {
		return Acquired{}, fmt.Errorf("%w: acquire: %v", ErrUnexpectedReply, reply)
	}
	a.Ahead, a.Clock, a.Queue = int(ints[3]), ints[4], queueState(ints[5])
	return a, nil
}

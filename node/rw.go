package node

import (
	"context"
	_ "embed"
	"time"
)

// Read-write locks (the lock client's RLock and WLock): per node, the
// writer is the plain lock key, and the readers are a sorted set beside it
// (ReaderKeys), reader token -> end of its lease on the node's clock, with
// a writer-waiting mark that keeps new readers out while a writer waits.

//go:embed rwread.lua
var rwReadSrc string

//go:embed rwwrite.lua
var rwWriteSrc string

//go:embed rwextend.lua
var rwExtendSrc string

//go:embed rwrelease.lua
var rwReleaseSrc string

//go:embed rwleave.lua
var rwLeaveSrc string

var (
	// Both acquisitions grant (a reader, or the writer's lock key): the
	// restart quarantine refuses them.
	rwReadScript    = newGrantScript("rwread", 3, 1, rwReadSrc).withHolders(2)
	rwWriteScript   = newGrantScript("rwwrite", 4, 1, rwWriteSrc)
	rwExtendScript  = newScript("rwextend", 1, 0, rwExtendSrc).withHolders(1)
	rwReleaseScript = newScript("rwrelease", 2, 1, rwReleaseSrc).withHolders(2)
	rwLeaveScript   = newScript("rwleave", 2, 1, rwLeaveSrc)
)

// withHolders records that KEYS[pos] of s is a container of holders that
// share it (the readers of a read-write lock): adding a member to it grants,
// as writing the lock key does (Script.Holders).
func (s *script) withHolders(pos int) *script {
	s.holders = pos
	return s
}

// RWLocker is the part of Node that read-write locks use: a reader is a
// member of key's readers (ReaderKeys), with its own lease on the node's
// clock; a writer is key itself, taken only when no reader holds it.
type RWLocker interface {
	// AcquireRead adds token to key's readers for ttl, only if key (the
	// writer) does not exist and no writer waits (the mark AcquireWrite
	// leaves); readers whose lease ran out are dropped. The readers' set
	// lives as long as its longest lease: a reader never shortens it. It
	// reports as Acquire does (no fence counter: Fence and HasFence unset;
	// Clock the node's clock when refused).
	AcquireRead(ctx context.Context, key, token string, ttl time.Duration) (Acquired, error)
	// ExtendRead renews token's lease among key's readers to ttl from now,
	// only if it is still there (it never re-adds a reader), and reports
	// whether it did.
	ExtendRead(ctx context.Context, key, token string, ttl time.Duration) (bool, error)
	// ReleaseRead removes token from key's readers and reports whether it
	// was there. With notify, when no reader is left, key's watchers are
	// told (as Release tells them), which wakes waiting writers.
	ReleaseRead(ctx context.Context, key, token string, notify bool) (bool, error)
	// AcquireWrite takes key as Acquire does (SET NX PX, with the fence
	// counter at fenceKey), only if no reader holds it. A writer refused
	// because of readers, with a non-empty writer id, leaves a mark for
	// wait that refuses new readers (AcquireRead) so that they cannot starve
	// it; its next attempts renew the mark, and its grant removes it.
	AcquireWrite(ctx context.Context, key, fenceKey, token string, ttl time.Duration, writer string, wait time.Duration) (Acquired, error)
	// LeaveWrite removes the mark of the waiting writer (AcquireWrite's
	// writer id) if it is still its own, and then tells key's watchers, so
	// that new readers need not wait for it to expire; it reports whether
	// the mark was the writer's.
	LeaveWrite(ctx context.Context, key, writer string) (bool, error)
}

// ReaderKeys returns the keys of key's readers (a sorted set) and of its
// writer-waiting mark, in key's hash slot.
func ReaderKeys(key string) (readers, waiting string) {
	waiting = key + ":rw:wait" // one allocation for both
	return waiting[:len(key)+len(":rw")], waiting
}

// AcquireReadCall is RWLocker.AcquireRead's call.
func AcquireReadCall(key, token string, ttl time.Duration) Call {
	r, w := ReaderKeys(key)
	return Call{Script{rwReadScript}, []string{key, r, w}, []any{token, msArg(ttl)}}
}

// ExtendReadCall is RWLocker.ExtendRead's call.
func ExtendReadCall(key, token string, ttl time.Duration) Call {
	r, _ := ReaderKeys(key)
	return Call{Script{rwExtendScript}, []string{r}, []any{token, msArg(ttl)}}
}

// ReleaseReadCall is RWLocker.ReleaseRead's call.
func ReleaseReadCall(key, token string, notify bool) Call {
	r, _ := ReaderKeys(key)
	n := "0"
	if notify {
		n = "1"
	}
	return Call{Script{rwReleaseScript}, []string{key, r}, []any{token, n}}
}

// AcquireWriteCall is RWLocker.AcquireWrite's call.
func AcquireWriteCall(key, fenceKey, token string, ttl time.Duration, writer string, wait time.Duration) Call {
	r, w := ReaderKeys(key)
	return Call{Script{rwWriteScript}, []string{key, fenceKey, r, w},
		[]any{token, msArg(ttl), writer, max(wait.Milliseconds(), 1)}}
}

// LeaveWriteCall is RWLocker.LeaveWrite's call.
func LeaveWriteCall(key, writer string) Call {
	_, w := ReaderKeys(key)
	return Call{Script{rwLeaveScript}, []string{key, w}, []any{writer}}
}

var _ RWLocker = (*Scripted)(nil)

// AcquireRead implements RWLocker.
func (s *Scripted) AcquireRead(ctx context.Context, key, token string, ttl time.Duration) (Acquired, error) {
	c := AcquireReadCall(key, token, ttl)
	reply, err := s.run(ctx, c)
	if err != nil {
		return Acquired{}, err
	}
	a, err := ParseAcquiredReply(reply)
	if err != nil || !a.OK || s.Granted == nil {
		return a, err
	}
	if err := s.Granted(); err != nil {
		// The grant went to a process that must not grant: taken back.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.takeBackTimeout())
		defer cancel()
		_, _ = s.flag(uctx, ReleaseReadCall(key, token, false))
		return Acquired{}, err
	}
	return a, nil
}

// ExtendRead implements RWLocker.
func (s *Scripted) ExtendRead(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	return s.flag(ctx, ExtendReadCall(key, token, ttl))
}

// ReleaseRead implements RWLocker.
func (s *Scripted) ReleaseRead(ctx context.Context, key, token string, notify bool) (bool, error) {
	return s.flag(ctx, ReleaseReadCall(key, token, notify))
}

// AcquireWrite implements RWLocker.
func (s *Scripted) AcquireWrite(ctx context.Context, key, fenceKey, token string, ttl time.Duration, writer string, wait time.Duration) (Acquired, error) {
	return s.acquire(ctx, AcquireWriteCall(key, fenceKey, token, ttl, writer, wait))
}

// LeaveWrite implements RWLocker.
func (s *Scripted) LeaveWrite(ctx context.Context, key, writer string) (bool, error) {
	return s.flag(ctx, LeaveWriteCall(key, writer))
}

// takeBackTimeout bounds the release that takes back a grant Granted
// refused.
func (s *Scripted) takeBackTimeout() time.Duration {
	if s.Timeout <= 0 {
		return DefaultTimeout
	}
	return s.Timeout
}

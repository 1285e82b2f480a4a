package node

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// layout is EVALSHA's argument list as redisEvaler.Eval lays c out.
func layout(c Call) []any {
	args := []any{c.Script.s.hashArg, c.Script.s.keys}
	for _, k := range c.Keys {
		args = append(args, k)
	}
	return append(args, c.Args...)
}

// LockArgs sends what Acquire and ReleaseFair send: the same scripts, keys
// and arguments, in the same order.
func TestLockArgsAreTheCalls(t *testing.T) {
	const key, fence, token = "p:{r}", "p:{r}:fence", "0123456789abcdef0123456789abcdef"
	ttl := 1500 * time.Millisecond
	for _, tell := range []bool{false, true} {
		var a LockArgs
		a.Init(key, fence, token, ttl, tell)

		acq := AcquireCall(key, fence, token, ttl)
		assert.Equal(t, acq, a.acquireCall())
		assert.Equal(t, layout(acq), a.acquireArgv[:])
		assert.True(t, a.acquireCall().Script.Grants())

		rel := ReleaseFairCall(key, token, "", tell)
		assert.Equal(t, rel, a.releaseCall())
		assert.Equal(t, layout(rel), a.releaseArgv[:])

		a.SetWaiter("group/7")
		rel = ReleaseFairCall(key, token, "group/7", tell)
		assert.Equal(t, rel, a.releaseCall())
		assert.Equal(t, layout(rel), a.releaseArgv[:])
		assert.False(t, a.releaseCall().Script.Grants())
	}
}

// The queue's mark is named as QueueMarkKey names it, and the queue's keys
// as QueueKeys does, whichever function laid them out.
func TestQueueKeysOneAllocation(t *testing.T) {
	for _, key := range []string{"", "k", "redlock:{r}"} {
		q, qx, qm := queueKeys(key)
		wq, wqx := QueueKeys(key)
		assert.Equal(t, wq, q)
		assert.Equal(t, wqx, qx)
		assert.Equal(t, QueueMarkKey(key), qm)
	}
}

var sinkArgs *LockArgs

// Laying out an uncontended lock's calls costs 7 allocations: the LockArgs,
// the queue's three key names (one string), and the boxing of the lock key
// (also the second key when the counter is not read), the queue's keys and
// the token. The queue's mark costs one boxing, paid for by not boxing the
// lock key twice (issue 26: allocations per Lock+Release).
func TestLockArgsInitAllocations(t *testing.T) {
	key := string([]byte("redlock:{allocs}"))
	for _, tc := range []struct {
		fenceKey string
		want     float64
	}{{"", 7}, {key + ":fence", 8}} {
		n := testing.AllocsPerRun(200, func() {
			a := new(LockArgs)
			a.Init(key, tc.fenceKey, "0123456789abcdef0123456789abcdef", 1500*time.Millisecond, false)
			sinkArgs = a
		})
		assert.Equal(t, tc.want, n, "fence key %q", tc.fenceKey)
	}
}

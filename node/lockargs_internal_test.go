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
	var a LockArgs
	a.Init(key, fence, token, ttl)

	acq := AcquireCall(key, fence, token, ttl)
	assert.Equal(t, acq, a.acquireCall())
	assert.Equal(t, layout(acq), a.acquireArgv[:])
	assert.True(t, a.acquireCall().Script.Grants())

	rel := ReleaseFairCall(key, token, "")
	assert.Equal(t, rel, a.releaseCall())
	assert.Equal(t, layout(rel), a.releaseArgv[:])

	a.SetWaiter("group/7")
	rel = ReleaseFairCall(key, token, "group/7")
	assert.Equal(t, rel, a.releaseCall())
	assert.Equal(t, layout(rel), a.releaseArgv[:])
	assert.False(t, a.releaseCall().Script.Grants())
}

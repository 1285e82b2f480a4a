package fence_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/fence"
	"github.com/redlock-go/redlock/redistest"
)

func TestCheck(t *testing.T) {
	tests := []struct {
		highest, token uint64
		ok             bool
	}{
		{0, 0, true}, {0, 1, true}, {41, 42, true}, {42, 42, true}, {42, 41, false},
		{^uint64(0), ^uint64(0) - 1, false}, {^uint64(0) - 1, ^uint64(0), true},
	}
	for _, tt := range tests {
		err := fence.Check(tt.highest, tt.token)
		if tt.ok {
			assert.NoError(t, err, "%+v", tt)
			continue
		}
		assert.ErrorIs(t, err, fence.ErrStale)
		var se *fence.StaleError
		require.True(t, errors.As(err, &se))
		assert.Equal(t, tt.token, se.Token)
		assert.Equal(t, tt.highest, se.Highest)
	}
}

func TestValue(t *testing.T) {
	var v fence.Value[string]
	require.NoError(t, v.Store(42, "B's write"))
	err := v.Store(41, "A's late write")
	require.ErrorIs(t, err, fence.ErrStale, "token 41 arriving after 42 is refused")
	assert.EqualError(t, err, "fence: stale token 41: 42 already accepted")
	require.NoError(t, v.Store(42, "B again"), "a holder may write again with its token")
	got, highest := v.Load()
	assert.Equal(t, "B again", got)
	assert.Equal(t, uint64(42), highest)
}

func TestValueConcurrent(t *testing.T) {
	var v fence.Value[[]uint64]
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for tok := uint64(w); tok < 400; tok += 8 {
				_ = v.Update(tok, func(old []uint64) []uint64 { return append(old, tok) })
			}
		}()
	}
	wg.Wait()
	got, highest := v.Load()
	require.NotEmpty(t, got)
	for i := 1; i < len(got); i++ {
		assert.Greater(t, got[i], got[i-1], "accepted tokens only grow")
	}
	assert.Equal(t, got[len(got)-1], highest)
}

func TestWriteRedis(t *testing.T) {
	s := redistest.Start(t)
	c, err := redis.Dial("tcp", s.Addr())
	require.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	v, h, err := fence.ReadRedis(ctx, c, "res")
	require.NoError(t, err)
	assert.Equal(t, "", v)
	assert.Zero(t, h)

	require.NoError(t, fence.WriteRedis(ctx, c, "res", 42, "from B"))
	err = fence.WriteRedis(ctx, c, "res", 41, "from stale A")
	var se *fence.StaleError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, uint64(42), se.Highest)
	require.NoError(t, fence.WriteRedis(ctx, c, "res", 42, "B again"))
	// Exact above 2^53, where Lua numbers would round.
	require.NoError(t, fence.WriteRedis(ctx, c, "res", 9007199254740993, "big"))
	require.ErrorIs(t, fence.WriteRedis(ctx, c, "res", 9007199254740992, "smaller big"), fence.ErrStale)
	require.ErrorIs(t, fence.WriteRedis(ctx, c, "res", 100, "short"), fence.ErrStale)

	v, h, err = fence.ReadRedis(ctx, c, "res")
	require.NoError(t, err)
	assert.Equal(t, "big", v)
	assert.Equal(t, uint64(9007199254740993), h)
}

func ExampleValue() {
	var balance fence.Value[int]
	_ = balance.Store(42, 100)  // the holder with token 42 writes
	err := balance.Store(41, 0) // a paused holder with token 41 comes back
	v, highest := balance.Load()
	fmt.Println(errors.Is(err, fence.ErrStale), v, highest)
	// Output: true 100 42
}

package goredis

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/fence"
)

var guardedWrite = redis.NewScript(fence.GuardedWriteSource())

// WriteFenced is fence.WriteRedis over go-redis: it stores value in the hash at
// key (field "value", with the token in field "fence") in one atomic script,
// only if token is not lower than the token stored there; otherwise it returns
// a *fence.StaleError and changes nothing. The hash is compatible with
// fence.WriteRedis and fence.ReadRedis.
func WriteFenced(ctx context.Context, c redis.Scripter, key string, token uint64, value string) error {
	reply, err := guardedWrite.Run(ctx, c, []string{key}, strconv.FormatUint(token, 10), value).Slice()
	if err != nil {
		return fmt.Errorf("goredis: guarded write: %w", err)
	}
	if len(reply) != 2 {
		return fmt.Errorf("goredis: guarded write: unexpected reply %v", reply)
	}
	ok, ok1 := reply[0].(int64)
	hs, ok2 := reply[1].(string)
	highest, err := strconv.ParseUint(hs, 10, 64)
	if !ok1 || !ok2 || err != nil {
		return fmt.Errorf("goredis: guarded write: unexpected reply %v", reply)
	}
	if ok != 1 {
		return &fence.StaleError{Token: token, Highest: highest}
	}
	return nil
}

// ReadFenced returns the value and the highest token stored at key by
// WriteFenced (zero values when the key does not exist).
func ReadFenced(ctx context.Context, c redis.Cmdable, key string) (value string, highest uint64, err error) {
	vals, err := c.HMGet(ctx, key, "value", "fence").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return "", 0, fmt.Errorf("goredis: read: %w", err)
	}
	if len(vals) != 2 {
		return "", 0, fmt.Errorf("goredis: read: unexpected reply %v", vals)
	}
	value, _ = vals[0].(string)
	if hs, ok := vals[1].(string); ok {
		if highest, err = strconv.ParseUint(hs, 10, 64); err != nil {
			return "", 0, fmt.Errorf("goredis: read: bad token %q", hs)
		}
	}
	return value, highest, nil
}

package fence

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"

	"github.com/gomodule/redigo/redis"
)

//go:embed guarded_write.lua
var guardedWriteSrc string

var guardedWrite = redis.NewScript(1, guardedWriteSrc)

// WriteRedis stores value in the hash at key (field "value", with the token in
// field "fence") in one atomic script, only if token is not lower than the token
// stored there; otherwise it returns a *StaleError and changes nothing. The
// connection must support contexts (redigo's do).
func WriteRedis(ctx context.Context, c redis.Conn, key string, token uint64, value string) error {
	reply, err := redis.Values(guardedWrite.DoContext(ctx, c, key, strconv.FormatUint(token, 10), value))
	if err != nil {
		return fmt.Errorf("fence: guarded write: %w", err)
	}
	if len(reply) != 2 {
		return fmt.Errorf("fence: guarded write: unexpected reply %v", reply)
	}
	ok, err1 := redis.Int64(reply[0], nil)
	hs, err2 := redis.String(reply[1], nil)
	highest, err3 := strconv.ParseUint(hs, 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return fmt.Errorf("fence: guarded write: unexpected reply %v", reply)
	}
	if ok != 1 {
		return &StaleError{Token: token, Highest: highest}
	}
	return nil
}

// ReadRedis returns the value and the highest token stored at key by WriteRedis
// (zero values when the key does not exist).
func ReadRedis(ctx context.Context, c redis.Conn, key string) (value string, highest uint64, err error) {
	vals, err := redis.Strings(redis.DoContext(c, ctx, "HMGET", key, "value", "fence"))
	if err != nil {
		return "", 0, fmt.Errorf("fence: read: %w", err)
	}
	if vals[1] != "" {
		if highest, err = strconv.ParseUint(vals[1], 10, 64); err != nil {
			return "", 0, fmt.Errorf("fence: read: bad token %q", vals[1])
		}
	}
	return vals[0], highest, nil
}

package rueidis

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	rd "github.com/redis/rueidis"

	"github.com/redlock-go/redlock/fence"
)

var guardedWrite = rd.NewLuaScript(fence.GuardedWriteSource())

// WriteFenced is fence.WriteRedis over rueidis: it stores value in the hash at
// key (field "value", with the token in field "fence") in one atomic script,
// only if token is not lower than the token stored there; otherwise it returns
// a *fence.StaleError and changes nothing. The hash is compatible with
// fence.WriteRedis and fence.ReadRedis.
func WriteFenced(ctx context.Context, c rd.Client, key string, token uint64, value string) error {
	reply, err := guardedWrite.Exec(ctx, c, []string{key}, []string{strconv.FormatUint(token, 10), value}).ToArray()
	if err != nil {
		return fmt.Errorf("rueidis: guarded write: %w", err)
	}
	if len(reply) != 2 {
		return fmt.Errorf("rueidis: guarded write: unexpected reply %v", reply)
	}
	ok, err1 := reply[0].AsInt64()
	hs, err2 := reply[1].ToString()
	highest, err3 := strconv.ParseUint(hs, 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return fmt.Errorf("rueidis: guarded write: unexpected reply: %w", err)
	}
	if ok != 1 {
		return &fence.StaleError{Token: token, Highest: highest}
	}
	return nil
}

// ReadFenced returns the value and the highest token stored at key by
// WriteFenced (zero values when the key does not exist).
func ReadFenced(ctx context.Context, c rd.Client, key string) (value string, highest uint64, err error) {
	vals, err := c.Do(ctx, c.B().Hmget().Key(key).Field("value", "fence").Build()).ToArray()
	if err != nil {
		return "", 0, fmt.Errorf("rueidis: read: %w", err)
	}
	if len(vals) != 2 {
		return "", 0, fmt.Errorf("rueidis: read: unexpected reply %v", vals)
	}
	if !vals[0].IsNil() {
		if value, err = vals[0].ToString(); err != nil {
			return "", 0, fmt.Errorf("rueidis: read: %w", err)
		}
	}
	if !vals[1].IsNil() {
		hs, err := vals[1].ToString()
		if err != nil {
			return "", 0, fmt.Errorf("rueidis: read: %w", err)
		}
		if highest, err = strconv.ParseUint(hs, 10, 64); err != nil {
			return "", 0, fmt.Errorf("rueidis: read: bad token %q", hs)
		}
	}
	return value, highest, nil
}

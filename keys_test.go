package redlock_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/redistest"
)

// crc16 is CRC-16/XMODEM, the checksum Redis Cluster hashes keys with.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// slot is the Cluster hash slot of key, following the Redis Cluster
// specification: only a non-empty text between the first "{" and the first "}"
// after it is hashed, if there is one.
func slot(key string) int {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			key = key[open+1 : open+1+end]
		}
	}
	return int(crc16(key)) % 16384
}

// keyNames are resource names whose braces would break a naive hash tag.
var keyNames = []string{"orders", "}x", "{", "}", "{}", "a{b}c", "a}b{c", "{{x}}", "tag}{", "ключ", "with space", strings.Repeat("}", 40)}

func TestKeysShareSlot(t *testing.T) {
	assert.Equal(t, uint16(0x31C3), crc16("123456789"), "CRC-16/XMODEM check value")
	for _, r := range keyNames {
		for _, prefix := range []string{"", "redlock:", "app:"} {
			lk, fk := redlock.LockKey(prefix, r), redlock.FenceKey(prefix, r)
			assert.Equal(t, lk+redlock.FenceSuffix, fk)
			assert.True(t, strings.HasPrefix(lk, prefix), lk)
			assert.Equal(t, slot(lk), slot(fk), "resource %q: %s and %s in different slots", r, lk, fk)
			assert.Equal(t, slot("{"+redlock.HashTag(r)+"}"), slot(lk), "resource %q: the key's slot is its tag's", r)
		}
	}
	// Names without braces keep the documented keys.
	assert.Equal(t, "redlock:{orders}", redlock.LockKey(redlock.DefaultKeyPrefix, "orders"))
	assert.Equal(t, "redlock:{orders}:fence", redlock.FenceKey(redlock.DefaultKeyPrefix, "orders"))
	assert.Equal(t, "redlock:{#77994711e5de6a0a}}x", redlock.LockKey(redlock.DefaultKeyPrefix, "}x"))
}

func FuzzKeySlot(f *testing.F) {
	for _, r := range keyNames {
		f.Add(r, "orders")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		for _, r := range []string{a, b} {
			if r == "" {
				continue // refused by the Client (ErrInvalid): it has no key
			}
			lk, fk := redlock.LockKey("redlock:", r), redlock.FenceKey("redlock:", r)
			if slot(lk) != slot(fk) {
				t.Fatalf("resource %q: %s and %s in different slots", r, lk, fk)
			}
			if strings.ContainsAny(redlock.HashTag(r), "{}") || redlock.HashTag(r) == "" {
				t.Fatalf("resource %q: tag %q is not a usable hash tag", r, redlock.HashTag(r))
			}
		}
		if a != b && redlock.LockKey("p:", a) == redlock.LockKey("p:", b) {
			t.Fatalf("resources %q and %q share the key %s", a, b, redlock.LockKey("p:", a))
		}
	})
}

// TestClusterSlots runs locks whose names contain braces on a cluster-enabled
// redis-server, which refuses a script whose keys lie in different slots
// (CROSSSLOT), and checks the slots computed here against the server's.
func TestClusterSlots(t *testing.T) {
	s := redistest.Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	_, err := s.Do("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := redis.String(s.Do("CLUSTER", "INFO"))
		return err == nil && strings.Contains(info, "cluster_state:ok")
	}, 10*time.Second, 10*time.Millisecond)

	c, err := redlock.Dial([]string{s.URL()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	for _, r := range keyNames {
		for _, k := range []string{redlock.LockKey(redlock.DefaultKeyPrefix, r), redlock.FenceKey(redlock.DefaultKeyPrefix, r)} {
			got, err := redis.Int(s.Do("CLUSTER", "KEYSLOT", k))
			require.NoError(t, err)
			assert.Equal(t, got, slot(k), "slot of %s", k)
		}
		ctx := ctxT(t, 5*time.Second)
		l, err := c.TryLock(ctx, r)
		require.NoError(t, err, "resource %q", r)
		_, err = l.Fence(ctx)
		require.NoError(t, err, "resource %q", r)
		require.NoError(t, l.Extend(ctx), "resource %q", r)
		require.NoError(t, l.Release(ctx), "resource %q", r)
	}
}

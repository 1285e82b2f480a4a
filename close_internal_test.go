package redlock

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/redistest"
)

// Lock and TryLock calls racing Close; after Close no waiter of the
// closed client is left in any node's queue.
func TestCloseRacesLocks(t *testing.T) {
	servers := redistest.StartN(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for round := 0; round < 30; round++ {
		fair := round%2 == 0
		t.Run(fmt.Sprintf("round%d-fair=%v", round, fair), func(t *testing.T) {
			opts := []Option{WithRetryBackoff(time.Millisecond, 20*time.Millisecond)}
			if fair {
				opts = append(opts, WithFair())
			}
			res := fmt.Sprintf("cr%d", round)
			h, err := Dial(redistest.URLs(servers), opts...)
			require.NoError(t, err)
			defer h.Close()
			held, err := h.Lock(ctx, res)
			require.NoError(t, err)
			c, err := Dial(redistest.URLs(servers), opts...)
			require.NoError(t, err)
			var wg sync.WaitGroup
			for i := 0; i < 20; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					time.Sleep(time.Duration(rand.IntN(60)) * time.Millisecond)
					r := res
					if i%3 == 0 {
						r = fmt.Sprintf("%s-%d", res, i)
					}
					if i%4 == 0 {
						l, err := c.TryLock(ctx, r)
						if err == nil {
							_ = l.Release(ctx)
						}
						return
					}
					l, err := c.Lock(ctx, r)
					if err == nil {
						_ = l.Release(ctx)
					}
				}()
			}
			time.Sleep(time.Duration(20+rand.IntN(40)) * time.Millisecond)
			start := time.Now()
			require.NoError(t, c.Close())
			t.Logf("Close took %v", time.Since(start))
			wg.Wait()
			for i, s := range servers {
				conn, err := s.Dial()
				require.NoError(t, err)
				keys, _ := redis.Strings(conn.Do("KEYS", "*"))
				for _, k := range keys {
					if !strings.Contains(k, "{"+res+"}") {
						continue // free resources: a lock granted just before Close stays queued (Release fails: closed)
					}
					var body string
					switch {
					case strings.HasSuffix(k, ":q"):
						v, _ := redis.Strings(conn.Do("ZRANGE", k, 0, -1))
						body = strings.Join(v, ",")
					case strings.HasSuffix(k, ":wq"), strings.HasSuffix(k, ":wk"):
						body, _ = redis.String(conn.Do("GET", k))
					}
					assert.NotContains(t, body, c.waiterGroup, "node %d %s after Close", i, k)
				}
				conn.Close()
			}
			require.NoError(t, held.Release(ctx))
		})
	}
}

package redlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

// TestQuarantineP5Timeline runs docs/safety.md's P5 timeline on real
// redis-servers, through every way a Lock call grants (the plain attempt,
// the waiters' queue in the default mode and in fair mode), with the contender
// already waiting when the node restarts and with a contender created after
// the restart: A holds on n1 and n2 (n3 is held by someone else, then
// freed); n2 restarts empty; B, whose nodes quarantine a restarted node for
// longer than the TTL, tries until A's lease ends and must not be granted
// before then. Before the quarantine covered the queued and fair scripts, B
// in fair mode was granted n2 and n3 in 3 of 5 runs.
func TestQuarantineP5Timeline(t *testing.T) {
	const (
		ttl        = 2 * time.Second
		quarantine = 3 * time.Second // > ttl, as docs/safety.md asks
	)
	for _, fair := range []bool{false, true} {
		for _, waiting := range []bool{false, true} {
			name := fmt.Sprintf("fair=%t/waiting=%t", fair, waiting)
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				servers := redistest.StartN(t, 3)
				// The nodes have been up longer than the quarantine (and the
				// second by which Redis rounds its uptime) before anyone
				// connects: only the restart below quarantines n2.
				for _, s := range servers {
					s.WaitUptime(quarantine + time.Second)
				}
				ctx := ctxT(t, 30*time.Second)
				const resource = "p5"
				key := redlock.LockKey(redlock.DefaultKeyPrefix, resource)
				_, err := servers[2].Do("SET", key, "someone-else", "PX", 60000)
				require.NoError(t, err)

				opts := []redlock.Option{redlock.WithTTL(ttl), redlock.WithRetryBackoff(5*time.Millisecond, 20*time.Millisecond),
					redlock.WithNodeOptions(node.WithRestartQuarantine(quarantine)), redlock.WithBreaker(0)}
				if fair {
					opts = append(opts, redlock.WithFair())
				}
				a := dialed(t, servers, opts...)
				held, err := a.Lock(ctx, resource)
				require.NoError(t, err)
				heldEverywhere(t, servers[:2], key)

				// B tries until A's lease ends: any grant before then is a
				// second holder.
				bctx, cancel := context.WithDeadline(ctx, held.Until())
				defer cancel()
				got := make(chan error, 1)
				lockB := func(b *redlock.Client) {
					l, err := b.Lock(bctx, resource)
					if err == nil {
						err = fmt.Errorf("B was granted the lock %v before A's lease ended", time.Until(held.Until()))
						_ = l.Release(context.Background())
					} else if bctx.Err() == nil {
						err = fmt.Errorf("B's Lock ended before A's lease did: %w", err)
					} else {
						err = nil
					}
					got <- err
				}
				var b *redlock.Client
				if waiting {
					attempts := make(chan struct{}, 1)
					b = dialed(t, servers, append(opts, redlock.WithHooks(redlock.Hooks{
						OnAttempt: func(redlock.AttemptEvent) {
							select {
							case attempts <- struct{}{}:
							default:
							}
						},
					}))...)
					go lockB(b)
					<-attempts // B is waiting, its connections to n2 open
				}
				servers[1].Kill()
				servers[1].Restart()
				_, err = servers[2].Do("DEL", key) // n3 is free: B needs only n2 besides
				require.NoError(t, err)
				if !waiting {
					b = dialed(t, servers, opts...)
					go lockB(b)
				}
				require.NoError(t, <-got)
				_ = held.Release(ctx) // A's lease has ended, and n2 forgot it: nothing to assert
			})
		}
	}
}

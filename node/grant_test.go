package node_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

// TestEveryLuaFileIsAScript: every .lua file of the package is a script that
// Scripts returns, or a fragment prepended to some (wakequeue.lua): a script
// cannot escape the enumeration the grant checks below rely on.
func TestEveryLuaFileIsAScript(t *testing.T) {
	files, err := filepath.Glob("*.lua")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	byName := map[string]node.Script{}
	for _, s := range node.Scripts() {
		byName[s.Name()] = s
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		name := strings.TrimSuffix(f, ".lua")
		if _, ok := byName[name]; ok {
			assert.Contains(t, byName[name].Source(), string(src), "%s: the script %q runs another source", f, name)
			continue
		}
		in := 0
		for _, s := range node.Scripts() {
			if strings.Contains(s.Source(), string(src)) {
				in++
			}
		}
		assert.Positive(t, in, "%s is neither a script of node.Scripts nor a part of one", f)
	}
}

// lockWrite matches a Lua call that writes key KEYS[pos] with a command that
// can create it or give it a new value.
func lockWrite(pos int) *regexp.Regexp {
	return regexp.MustCompile(`(?i)redis\.p?call\(\s*'(SET|SETNX|SETEX|PSETEX|GETSET|MSET|MSETNX|SETRANGE|APPEND|INCR\w*|DECR\w*|RENAME\w*|COPY|RESTORE|MOVE|HSET\w*|LPUSH|RPUSH|SADD|ZADD)'\s*,\s*KEYS\[` + fmt.Sprint(pos) + `\]`)
}

// TestGrantScriptsAreMarked enumerates every script a node runs and checks,
// in its source and on a real redis-server, that the scripts that can
// create or overwrite the lock key (KEYS[Script.LockKey]) with a new token
// are exactly those marked as grants (Script.Grants), which the restart
// quarantine refuses. A script that takes no lock key cannot grant. The
// behavioural check runs each script with every combination of plausible
// arguments (the probe token, a number, an empty string, the time now in µs)
// in five argument positions, on a free lock key and on one held by another
// token.
func TestGrantScriptsAreMarked(t *testing.T) {
	srv := redistest.Start(t)
	c, err := redis.Dial("tcp", srv.Addr())
	require.NoError(t, err)
	defer c.Close()

	const token = "probe-token"
	// A number serves as a TTL, a lease or a flag; the time now as a ticket
	// (a node queues a waiter only within node.TicketBound of its clock).
	fillers := []string{token, "10000", "", fmt.Sprint(time.Now().UnixMicro())}
	var argvs [][]any
	for code := 0; code < 1024; code++ { // 4^5: the scripts take at most 5 arguments
		argv := make([]any, 5)
		for i, k := 0, code; i < 5; i, k = i+1, k/4 {
			argv[i] = fillers[k%4]
		}
		argvs = append(argvs, argv)
	}

	grants := map[string]bool{}
	for _, s := range node.Scripts() {
		t.Run(s.Name(), func(t *testing.T) {
			if s.LockKey() == 0 {
				assert.False(t, s.Grants(), "%s takes no lock key, yet is marked as a grant script", s.Name())
				return
			}
			require.LessOrEqual(t, s.LockKey(), s.Keys())
			w := lockWrite(s.LockKey())
			assert.Equal(t, s.Grants() || w.MatchString(s.Source()), s.Grants(),
				"%s writes its lock key (%v) but is not marked as a grant script", s.Name(), w.FindString(s.Source()))
			_, err := c.Do("SCRIPT", "LOAD", s.Source())
			require.NoError(t, err)
			created, overwritten := probe(t, c, s, argvs, token)
			grants[s.Name()] = created || overwritten
			if s.Grants() {
				assert.True(t, created, "%s is marked as a grant script but never created the lock key: is the probe still right?", s.Name())
			} else {
				assert.False(t, created, "%s created the lock key: mark it newGrantScript", s.Name())
				assert.False(t, overwritten, "%s overwrote the lock key: mark it newGrantScript", s.Name())
			}
		})
	}
	t.Logf("scripts that granted in the probe: %v", grants)
}

// probe runs s with each argv, on a free lock key and on one held by another
// token (each run on keys of its own), and reports whether a run created the
// lock key, and whether one gave it a value other than the holder's.
func probe(t *testing.T, c redis.Conn, s node.Script, argvs [][]any, token string) (created, overwritten bool) {
	t.Helper()
	for _, held := range []bool{false, true} {
		keys := func(i int) []any {
			k := make([]any, s.Keys())
			for j := range k {
				k[j] = fmt.Sprintf("{%s:%t:%d}:%d", s.Name(), held, i, j)
			}
			return k
		}
		lock := func(i int) any { return keys(i)[s.LockKey()-1] }
		for i, argv := range argvs {
			ks := keys(i)
			if held {
				require.NoError(t, c.Send("SET", lock(i), "holder", "PX", 60000))
			}
			require.NoError(t, c.Send("EVALSHA", append(append([]any{s.Hash(), s.Keys()}, ks...), argv...)...))
		}
		require.NoError(t, c.Flush())
		for range argvs {
			if held {
				_, err := c.Receive()
				require.NoError(t, err)
			}
			_, _ = c.Receive() // a script may refuse arguments of the wrong shape: only what it wrote counts
		}
		for i := range argvs {
			require.NoError(t, c.Send("GET", lock(i)))
		}
		require.NoError(t, c.Flush())
		for range argvs {
			v, err := redis.String(c.Receive())
			switch {
			case errors.Is(err, redis.ErrNil):
			case err != nil:
				require.NoError(t, err)
			case !held:
				created = true
			case v != "holder":
				overwritten = true
			}
		}
	}
	_, err := c.Do("FLUSHALL")
	require.NoError(t, err)
	return created, overwritten
}

// grantCalls drives every script marked as a grant through the Node method
// that runs it (AcquireAnnounced runs the acquire script with one more
// argument).
var grantCalls = map[string][]func(ctx context.Context, n *node.Redis, key string) (node.Acquired, error){
	"acquire": {
		func(ctx context.Context, n *node.Redis, key string) (node.Acquired, error) {
			return n.Acquire(ctx, key, key+":fence", "t-new", 10*time.Second)
		},
		func(ctx context.Context, n *node.Redis, key string) (node.Acquired, error) {
			return n.AcquireAnnounced(ctx, key, key+":fence", "t-new", 10*time.Second)
		},
	},
	"wakeacquire": {func(ctx context.Context, n *node.Redis, key string) (node.Acquired, error) {
		return n.AcquireQueued(ctx, key, key+":fence", "t-new", 10*time.Second, node.Waiter{ID: "w/1", Ticket: time.Now().UnixMicro(), Lease: time.Second})
	}},
	"fairacquire": {func(ctx context.Context, n *node.Redis, key string) (node.Acquired, error) {
		return n.AcquireFair(ctx, key, key+":fence", "t-new", 10*time.Second, node.Waiter{ID: "w/1", Ticket: time.Now().UnixMicro(), Lease: time.Second})
	}},
}

// TestQuarantineRefusesEveryGrantScript sends each script that can grant a
// lock as the first command after a restart of the node, over the
// connection that the call dials and that detects the restart, and sees it
// refused: no lock key is written, whichever script it is.
func TestQuarantineRefusesEveryGrantScript(t *testing.T) {
	type grantCase struct {
		name string
		call func(ctx context.Context, n *node.Redis, key string) (node.Acquired, error)
	}
	var cases []grantCase
	for _, s := range node.Scripts() {
		if !s.Grants() {
			continue
		}
		calls := grantCalls[s.Name()]
		require.NotEmpty(t, calls, "no call drives the grant script %s through a Node method: add one to grantCalls", s.Name())
		for i, call := range calls {
			cases = append(cases, grantCase{fmt.Sprintf("%s/%d", s.Name(), i), call})
		}
	}
	const d = time.Second
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			// The node must have been up longer than the quarantine (plus
			// the second by which Redis rounds its uptime) before the client
			// first connects, or the first connection quarantines it.
			waitUptime(t, srv, d+time.Second)
			n, err := node.Dial(srv.URL(), node.WithRestartQuarantine(d))
			require.NoError(t, err)
			defer n.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			a, err := tc.call(ctx, n, "before")
			require.NoError(t, err)
			require.True(t, a.OK, "granted before the restart")

			srv.Kill()
			srv.Restart()
			for range 4 { // each connection broken by the restart fails one call
				a, err = tc.call(ctx, n, "after")
				if errors.Is(err, node.ErrQuarantined) {
					break
				}
				require.Error(t, err, "granted right after a restart (OK=%v): the quarantine missed this script", a.OK)
			}
			require.ErrorIs(t, err, node.ErrQuarantined)
			assert.Empty(t, srv.Keys("after*"), "a quarantined node must not receive the script")
		})
	}
}

// waitUptime waits until srv has been up at least d by its INFO server.
func waitUptime(t *testing.T, srv *redistest.Server, d time.Duration) {
	t.Helper()
	for {
		info, err := redis.String(srv.Do("INFO", "server"))
		require.NoError(t, err)
		_, rest, _ := strings.Cut(info, "uptime_in_seconds:")
		var up int
		_, _ = fmt.Sscan(rest, &up)
		if time.Duration(up)*time.Second >= d {
			return
		}
		time.Sleep(100 * time.Millisecond) // the uptime is read off the server's clock: nothing to await
	}
}

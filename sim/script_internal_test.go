package sim

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/gomodule/redigo/redis"

	rnode "github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

// hostConn is a connection to a fresh miniredis whose scripts a scriptHost runs.
func hostConn(t *testing.T) (redis.Conn, func() redis.Conn) {
	t.Helper()
	m, _ := newServer()
	t.Cleanup(m.Close)
	dial := func() redis.Conn {
		c, err := m.Dial()
		if err != nil {
			t.Fatal(err)
		}
		rc := redis.NewConn(c, 0, 0)
		t.Cleanup(func() { _ = rc.Close() })
		return rc
	}
	return dial(), dial
}

// bothConns returns a connection to a real redis-server and one to a script host.
func bothConns(t *testing.T) (real, host redis.Conn) {
	t.Helper()
	real, err := redistest.Start(t).Dial()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = real.Close() })
	host, _ = hostConn(t)
	return real, host
}

// TestScriptHostRepliesAsRedis runs the same commands on a real redis-server
// and on the simulation's script host, and compares the replies: how a
// script's result becomes a reply, how a call's reply becomes Lua values,
// errors, and the script cache.
func TestScriptHostRepliesAsRedis(t *testing.T) {
	real, host := bothConns(t)

	const probe = "return 1"
	steps := []struct {
		name string
		cmd  string
		args []any
		// errPrefix: both reply with an error that starts so (the texts
		// after the code differ between Redis and miniredis).
		errPrefix string
	}{
		{"nil", "EVAL", []any{"return nil", 0}, ""},
		{"false", "EVAL", []any{"return false", 0}, ""},
		{"true", "EVAL", []any{"return true", 0}, ""},
		{"number truncated", "EVAL", []any{"return 3.7", 0}, ""},
		{"negative", "EVAL", []any{"return -42", 0}, ""},
		{"string", "EVAL", []any{"return 'x y'", 0}, ""},
		{"array stops at nil", "EVAL", []any{"return {1, 'a', {2, false}, nil, 5}", 0}, ""},
		{"status table", "EVAL", []any{"return {ok = 'FINE'}", 0}, ""},
		{"error table", "EVAL", []any{"return {err = 'MYERR went wrong'}", 0}, "MYERR"},
		{"error_reply", "EVAL", []any{"return redis.error_reply('MYERR went wrong')", 0}, "MYERR"},
		{"status_reply", "EVAL", []any{"return redis.status_reply('FINE')", 0}, ""},
		{"KEYS and ARGV", "EVAL", []any{"return {KEYS[1], KEYS[2], ARGV[1], ARGV[2], #KEYS, #ARGV}", 2, "k1", "k2", "a1", "a2"}, ""},
		{"call: missing key is false", "EVAL", []any{"local v = redis.call('GET', KEYS[1]); return {v == false, type(v)}", 1, "missing"}, ""},
		{"call: status reply", "EVAL", []any{"local r = redis.call('SET', KEYS[1], 'v', 'PX', 60000); return r.ok", 1, "k"}, ""},
		{"call: SET NX refused is false", "EVAL", []any{"return {redis.call('SET', KEYS[1], 'w', 'NX') == false}", 1, "k"}, ""},
		{"call: integers and strings", "EVAL", []any{"return {redis.call('INCR', KEYS[1]), redis.call('GET', KEYS[1]), redis.call('PTTL', 'none')}", 1, "n"}, ""},
		{"call: number arguments", "EVAL", []any{"redis.call('SET', KEYS[1], 12345); return redis.call('GET', KEYS[1])", 1, "num"}, ""},
		{"call: array reply", "EVAL", []any{"redis.call('ZADD', KEYS[1], 1, 'a', 2, 'b'); return redis.call('ZRANGE', KEYS[1], 0, -1)", 1, "z"}, ""},
		{"call: MGET with a missing key", "EVAL", []any{"local g = redis.call('MGET', KEYS[1], KEYS[2]); return {g[1], g[2] == false}", 2, "k", "missing"}, ""},
		{"pcall: error table", "EVAL", []any{"local r = redis.pcall('INCR', KEYS[1]); return {type(r), r.err ~= nil}", 1, "k"}, ""},
		{"call: error ends the script", "EVAL", []any{"redis.call('INCR', KEYS[1]); return 1", 1, "k"}, "ERR"},
		{"TIME", "EVAL", []any{"local t = redis.call('TIME'); return {#t, type(t[1]), tonumber(t[2]) < 1000000}", 0}, ""},
		{"sha1hex", "EVAL", []any{"return redis.sha1hex('abc')", 0}, ""},
		{"no global created", "EVAL", []any{"x = 1; return 1", 0}, "ERR"},
		{"no unknown global read", "EVAL", []any{"return y", 0}, "ERR"},
		{"locals are per call", "EVAL", []any{"local z = (z0 or 0) + 1; return z", 0}, "ERR"},
		{"MULTI refused in a script", "EVAL", []any{"return redis.call('MULTI')", 0}, "ERR"},
		{"the next script's calls run", "EVAL", []any{"return redis.call('SET', KEYS[1], 'after').ok", 1, "k2"}, ""},
		{"BLPOP refused in a script", "EVAL", []any{"return redis.call('BLPOP', KEYS[1], 0)", 1, "list"}, "ERR"},
		{"syntax error", "EVAL", []any{"return (", 0}, "ERR"},
		{"too many keys", "EVAL", []any{"return 1", 3, "a"}, "ERR"},
		{"negative keys", "EVAL", []any{"return 1", -1}, "ERR"},
		{"EVALSHA unknown", "EVALSHA", []any{sha1Hex(probe), 0}, "NOSCRIPT"},
		{"SCRIPT LOAD", "SCRIPT", []any{"LOAD", probe}, ""},
		{"EVALSHA loaded", "EVALSHA", []any{sha1Hex(probe), 0}, ""},
		{"SCRIPT EXISTS", "SCRIPT", []any{"EXISTS", sha1Hex(probe), sha1Hex("return 2")}, ""},
		{"EVAL caches", "EVAL", []any{"return 2", 0}, ""},
		{"EVALSHA of an EVAL", "EVALSHA", []any{sha1Hex("return 2"), 0}, ""},
		{"SCRIPT FLUSH", "SCRIPT", []any{"FLUSH"}, ""},
		{"EVALSHA after FLUSH", "EVALSHA", []any{sha1Hex(probe), 0}, "NOSCRIPT"},
		{"SCRIPT EXISTS after FLUSH", "SCRIPT", []any{"EXISTS", sha1Hex(probe)}, ""},
	}
	for _, s := range steps {
		want, wantErr := real.Do(s.cmd, s.args...)
		got, gotErr := host.Do(s.cmd, s.args...)
		if s.errPrefix != "" {
			if wantErr == nil || !strings.HasPrefix(wantErr.Error(), s.errPrefix) {
				t.Fatalf("%s: redis-server replied %v, %v; the test expects an error %s...", s.name, want, wantErr, s.errPrefix)
			}
			if gotErr == nil || !strings.HasPrefix(gotErr.Error(), s.errPrefix) {
				t.Errorf("%s: the script host replied %v, %v; redis-server: %v", s.name, show(got), gotErr, wantErr)
			}
			continue
		}
		if wantErr != nil {
			t.Fatalf("%s: redis-server: %v", s.name, wantErr)
		}
		if gotErr != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: the script host replied %s (%v), redis-server %s", s.name, show(got), gotErr, show(want))
		}
	}
}

// TestScriptHostRunsTheLibraryScripts loads every script the library has on
// both (the host compiles it) and runs a lock's life with the plain scripts
// by EVALSHA, comparing the replies (but the node's clock in a refusal).
func TestScriptHostRunsTheLibraryScripts(t *testing.T) {
	real, host := bothConns(t)
	for _, s := range rnode.Scripts() {
		// The host keeps one interpreter per node: a global written around
		// its guard would outlive the call.
		for _, bad := range []string{"rawset", "setmetatable", "_G", "getfenv", "setfenv"} {
			if strings.Contains(s.Source(), bad) {
				t.Errorf("%s uses %s: the simulation's script host does not isolate it between calls", s.Name(), bad)
			}
		}
		for _, c := range []redis.Conn{real, host} {
			sha, err := redis.String(c.Do("SCRIPT", "LOAD", s.Source()))
			if err != nil || sha != s.Hash() {
				t.Fatalf("SCRIPT LOAD %s: %s, %v (its hash %s)", s.Name(), sha, err, s.Hash())
			}
		}
	}
	const lock, fence, meta = "{r}", "{r}:fence", "{r}:meta"
	steps := []struct {
		name  string
		s     rnode.Script
		args  []any
		clock int // index of the node's clock in the reply (compared as present only), or -1
	}{
		{"acquire", rnode.AcquireScript, []any{lock, fence, "A", "10000", "1"}, -1},
		{"acquire held elsewhere", rnode.AcquireScript, []any{lock, fence, "B", "10000", "1"}, 4},
		{"extend by the holder", rnode.ExtendScript, []any{lock, meta, "A", "20000"}, -1},
		{"extend by another", rnode.ExtendScript, []any{lock, meta, "B", "20000"}, -1},
		{"fence write", rnode.WriteFenceScript, []any{lock, fence, "A", "7"}, -1},
		{"fence read", rnode.ReadFenceScript, []any{lock, fence, "A"}, -1},
		{"release by another", rnode.ReleaseScript, []any{lock, "B", "0"}, -1},
		{"release by the holder", rnode.ReleaseScript, []any{lock, "A", "1"}, -1},
		{"acquire after release", rnode.AcquireScript, []any{lock, fence, "B", "10000", "1"}, -1},
	}
	for _, st := range steps {
		args := append([]any{st.s.Hash(), st.s.Keys()}, st.args...)
		want, wantErr := real.Do("EVALSHA", args...)
		got, gotErr := host.Do("EVALSHA", args...)
		if wantErr != nil || gotErr != nil {
			t.Fatalf("%s: redis-server %v, the script host %v", st.name, wantErr, gotErr)
		}
		if st.clock >= 0 {
			w, g := want.([]any), got.([]any)
			if len(w) <= st.clock || len(g) != len(w) {
				t.Fatalf("%s: redis-server %s, the script host %s", st.name, show(want), show(got))
			}
			w[st.clock], g[st.clock] = nil, nil
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: the script host replied %s, redis-server %s", st.name, show(got), show(want))
		}
	}
}

// show prints a reply with its byte strings as strings.
func show(v any) string {
	switch r := v.(type) {
	case []byte:
		return fmt.Sprintf("%q", r)
	case []any:
		parts := make([]string, len(r))
		for i, e := range r {
			parts[i] = show(e)
		}
		return "[" + strings.Join(parts, " ") + "]"
	default:
		return fmt.Sprintf("%#v", v)
	}
}

// TestScriptHostRunsAScriptAtOnce: no command of another client runs between
// a script's calls. A script reads a counter, works, and writes it back plus
// one, while other clients INCR it: with the script's calls run one by one
// (each under miniredis' lock only), increments are lost.
func TestScriptHostRunsAScriptAtOnce(t *testing.T) {
	_, dial := hostConn(t)
	const (
		clients = 4
		each    = 150
		script  = "local v = tonumber(redis.call('GET', KEYS[1]) or '0'); local s = 0; for i = 1, 2000 do s = s + i end; redis.call('SET', KEYS[1], v + 1); return s"
	)
	conns := make([]redis.Conn, 2*clients)
	for i := range conns {
		conns[i] = dial()
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(conns))
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				var err error
				if i%2 == 0 {
					_, err = c.Do("EVAL", script, 1, "counter")
				} else {
					_, err = c.Do("INCR", "counter")
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got, err := redis.Int(conns[0].Do("GET", "counter"))
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 * clients * each; got != want {
		t.Fatalf("counter %d, want %d: %d increments lost between a script's calls", got, want, want-got)
	}
}

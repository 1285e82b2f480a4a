package sim

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// scriptHost runs a node's Lua scripts (EVAL, EVALSHA) in one interpreter
// that it keeps for the node's life, in place of miniredis, which builds a new
// gopher-lua interpreter and opens its libraries for every script call: a
// quarter of the simulation's CPU time under -race (docs/testing.md, issue
// 24). The scripts' redis.call and redis.pcall still go to miniredis, so the
// commands, their replies and the node's clock are miniredis' as before.
//
// Atomicity: miniredis runs a script under its lock, which a script's calls
// dispatched from outside cannot share (its nested-call context is
// unexported). Instead every command the node receives takes the host's
// mutex, and a script holds it from its first call to its reply: no other
// client's command runs in between, as on Redis. The library sends no MULTI
// and no blocking command (which would hold the mutex while it waits).
//
// The simulation's own changes to a node (its clock, a flush, an eviction, a
// failover, the checker's reads: Node.atOnce) take the mutex too.
//
// Differences from miniredis' own scripting, none of which the library's
// scripts meet: no cjson, redis.log or redis.setresp; the globals' guard is
// set once per node (a script that creates a global fails, as there, but one
// that rawsets _G would leave it to the next: TestScriptHostRunsTheLibraryScripts
// checks that no library script does); a script's result is read without
// metamethods; the commands in notInScripts are refused.
type scriptHost struct {
	srv *server.Server

	mu sync.Mutex // one command at a time: see the type's documentation
	// passing is the peer whose command the host is handing to miniredis
	// (under mu, so one at a time), and inner the peer a script's calls are
	// dispatched on: the hook lets their commands through.
	passing atomic.Pointer[server.Peer]
	inner   *server.Peer
	// Under mu:
	scripts map[string]string // SHA-1 (hex, lower case) -> source: the node's script cache
	l       *lua.LState
	out     bytes.Buffer // what miniredis wrote to inner
	w       *bufio.Writer
}

// newServer starts a miniredis server (no listener: connections come from its
// Dial) whose scripts a scriptHost runs.
func newServer() (*miniredis.Miniredis, *scriptHost) {
	m := miniredis.NewMiniRedis()
	// miniredis makes its server at the first Dial, and sets the server's
	// pre-hook then: make it now, for the script host's hook to stay.
	c, err := m.Dial()
	if err != nil {
		panic(fmt.Sprintf("sim: starting miniredis: %v", err))
	}
	_ = c.Close()
	return m, newScriptHost(m.Server())
}

// newScriptHost installs a script host as srv's pre-hook.
func newScriptHost(srv *server.Server) *scriptHost {
	h := &scriptHost{srv: srv, scripts: map[string]string{}}
	h.w = bufio.NewWriter(&h.out)
	h.inner = server.NewPeer(h.w)
	h.l = h.newState()
	srv.SetPreHook(h.hook)
	return h
}

// newState builds the interpreter: the libraries miniredis opens (but
// cjson), KEYS and ARGV, the redis module, and the globals' guard.
func (h *scriptHost) newState() *lua.LState {
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{
		{lua.LoadLibName, lua.OpenPackage},
		{lua.BaseLibName, lua.OpenBase},
		{lua.CoroutineLibName, lua.OpenCoroutine},
		{lua.TabLibName, lua.OpenTable},
		{lua.StringLibName, lua.OpenString},
		{lua.MathLibName, lua.OpenMath},
		{lua.DebugLibName, lua.OpenDebug},
	} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(lib.open), Protect: true}, lua.LString(lib.name)); err != nil {
			panic(fmt.Sprintf("sim: opening Lua library %q: %v", lib.name, err))
		}
	}
	mod := l.NewTable()
	mod.RawSetString("call", l.NewFunction(h.call(true)))
	mod.RawSetString("pcall", l.NewFunction(h.call(false)))
	mod.RawSetString("sha1hex", l.NewFunction(func(l *lua.LState) int {
		l.Push(lua.LString(sha1Hex(l.CheckString(1))))
		return 1
	}))
	mod.RawSetString("error_reply", l.NewFunction(func(l *lua.LState) int {
		t := l.NewTable()
		t.RawSetString("err", lua.LString(l.CheckString(1)))
		l.Push(t)
		return 1
	}))
	mod.RawSetString("status_reply", l.NewFunction(func(l *lua.LState) int {
		t := l.NewTable()
		t.RawSetString("ok", lua.LString(l.CheckString(1)))
		l.Push(t)
		return 1
	}))
	g := l.G.Global
	g.RawSetString("redis", mod)
	g.RawSetString("server", mod)
	g.RawSetString("KEYS", l.NewTable())
	g.RawSetString("ARGV", l.NewTable())
	guard, err := compile(globalsGuard)
	if err == nil {
		l.Push(l.NewFunctionFromProto(guard))
		err = l.PCall(0, 0, nil)
	}
	if err != nil {
		panic(fmt.Sprintf("sim: guarding Lua globals: %v", err))
	}
	return l
}

// globalsGuard is the guard miniredis sets on every interpreter: a script may
// neither create nor read an unknown global (they would outlive the call
// here).
const globalsGuard = `
local dbg = debug
local mt = {}
setmetatable(_G, mt)
mt.__newindex = function (t, n, v)
  if dbg.getinfo(2) and dbg.getinfo(2, "S").what ~= "C" then
    error("Script attempted to create global variable '"..tostring(n).."'", 2)
  end
  rawset(t, n, v)
end
mt.__index = function (t, n)
  if dbg.getinfo(2) and dbg.getinfo(2, "S").what ~= "C" then
    error("Script attempted to access nonexistent global variable '"..tostring(n).."'", 2)
  end
  return rawget(t, n)
end
debug = nil
`

// hook is the server's pre-hook: it sees every command before miniredis.
func (h *scriptHost) hook(c *server.Peer, cmd string, args ...string) bool {
	if c == h.inner || c == h.passing.Load() {
		return false // a script's call, or handed over by pass (mu held): miniredis runs it
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch cmd {
	case "EVAL", "EVALSHA":
		h.eval(c, cmd, args)
		return true
	case "SCRIPT":
		if len(args) > 0 {
			switch strings.ToUpper(args[0]) {
			case "LOAD":
				if len(args) == 2 { // else miniredis' error
					if _, err := compile(args[1]); err != nil {
						c.WriteError(errCompile(err))
						return true
					}
					sha := sha1Hex(args[1])
					h.scripts[sha] = args[1]
					c.WriteBulk(sha)
					return true
				}
			case "FLUSH":
				h.flush()
			case "EXISTS":
				c.WriteLen(len(args) - 1)
				for _, sha := range args[1:] {
					if _, ok := h.scripts[strings.ToLower(sha)]; ok {
						c.WriteInt(1)
					} else {
						c.WriteInt(0)
					}
				}
				return true
			}
		}
	}
	h.pass(c, cmd, args)
	return true
}

// flush empties the node's script cache (a restart), under mu.
func (h *scriptHost) flush() { clear(h.scripts) }

// pass hands a command to miniredis, under mu.
func (h *scriptHost) pass(c *server.Peer, cmd string, args []string) {
	h.passing.Store(c)
	defer h.passing.Store(nil)
	h.srv.Dispatch(c, append([]string{cmd}, args...))
}

// eval runs EVAL or EVALSHA, under mu, with miniredis' replies and errors.
func (h *scriptHost) eval(c *server.Peer, cmd string, args []string) {
	if len(args) < 2 {
		c.WriteError(fmt.Sprintf("ERR wrong number of arguments for '%s' command", strings.ToLower(cmd)))
		return
	}
	src := args[0]
	if cmd == "EVALSHA" {
		s, ok := h.scripts[strings.ToLower(args[0])]
		if !ok {
			c.WriteError("NOSCRIPT No matching script. Please use EVAL.")
			return
		}
		src = s
	}
	n, err := strconv.Atoi(args[1])
	switch {
	case err != nil:
		c.WriteError("ERR value is not an integer or out of range")
		return
	case n < 0:
		c.WriteError("ERR Number of keys can't be negative")
		return
	case n > len(args)-2:
		c.WriteError("ERR Number of keys can't be greater than number of args")
		return
	}
	proto, err := compile(src)
	if err != nil {
		c.WriteError(errCompile(err))
		return
	}
	l := h.l
	keys, argv := l.CreateTable(n, 0), l.CreateTable(len(args)-2-n, 0)
	for i, k := range args[2 : 2+n] {
		keys.RawSetInt(i+1, lua.LString(k))
	}
	for i, a := range args[2+n:] {
		argv.RawSetInt(i+1, lua.LString(a))
	}
	l.G.Global.RawSetString("KEYS", keys)
	l.G.Global.RawSetString("ARGV", argv)
	l.Push(l.NewFunctionFromProto(proto))
	if err := l.PCall(0, 1, nil); err != nil {
		c.WriteError(errCompile(err))
	} else {
		if cmd == "EVAL" {
			h.scripts[sha1Hex(src)] = src // miniredis caches a script that ran
		}
		writeLua(c, l.Get(1))
	}
	l.SetTop(0)
}

// protos holds every script compiled so far, by source, for every node of
// every run (a compiled script is read-only: interpreters share it, as
// miniredis' do).
var protos sync.Map

func compile(src string) (*lua.FunctionProto, error) {
	if p, ok := protos.Load(src); ok {
		return p.(*lua.FunctionProto), nil
	}
	chunk, err := parse.Parse(strings.NewReader(src), "<string>")
	if err != nil {
		return nil, err
	}
	p, err := lua.Compile(chunk, "")
	if err != nil {
		return nil, err
	}
	protos.Store(src, p)
	return p, nil
}

// call is redis.call (failFast) or redis.pcall: the command goes to
// miniredis on the inner peer, and its reply comes back as Lua values, as
// miniredis converts them.
func (h *scriptHost) call(failFast bool) lua.LGFunction {
	return func(l *lua.LState) int {
		top := l.GetTop()
		if top == 0 {
			l.RaiseError("Please specify at least one argument for this redis lib call")
			return 0
		}
		args := make([]string, 0, top)
		for i := 1; i <= top; i++ {
			switch a := l.Get(i).(type) {
			case lua.LNumber:
				args = append(args, a.String())
			case lua.LString:
				args = append(args, string(a))
			default:
				l.RaiseError("Lua redis lib command arguments must be strings or integers")
				return 0
			}
		}
		if notInScripts[strings.ToUpper(args[0])] {
			// Redis refuses some; the others would stay on the inner peer,
			// shared by the node's later scripts, or block under mu.
			l.RaiseError("This Redis command is not allowed from script (simulation): %s", args[0])
			return 0
		}
		h.out.Reset()
		h.srv.Dispatch(h.inner, args)
		_ = h.w.Flush()
		res, err := server.ParseReply(bufio.NewReader(&h.out))
		if err == nil {
			if e, ok := res.(error); ok {
				err = e
			}
		}
		if err != nil {
			if failFast {
				l.RaiseError("%s", err.Error())
				return 0
			}
			t := l.NewTable()
			t.RawSetString("err", lua.LString(err.Error()))
			l.Push(t)
			return 1
		}
		l.Push(toLua(l, res))
		return 1
	}
}

// notInScripts are the commands a script may not call here: what Redis
// refuses in scripts (transactions, scripts, pub/sub subscriptions, blocking
// and connection commands) and SELECT, which Redis allows but which would
// stay on the shared inner peer. The library's scripts call none of them.
var notInScripts = map[string]bool{
	"MULTI": true, "EXEC": true, "DISCARD": true, "WATCH": true, "UNWATCH": true,
	"EVAL": true, "EVALSHA": true, "EVAL_RO": true, "EVALSHA_RO": true, "SCRIPT": true,
	"FCALL": true, "FCALL_RO": true, "FUNCTION": true,
	"SUBSCRIBE": true, "PSUBSCRIBE": true, "SSUBSCRIBE": true,
	"UNSUBSCRIBE": true, "PUNSUBSCRIBE": true, "SUNSUBSCRIBE": true,
	"BLPOP": true, "BRPOP": true, "BLMOVE": true, "BRPOPLPUSH": true, "BLMPOP": true,
	"BZPOPMIN": true, "BZPOPMAX": true, "BZMPOP": true, "XREAD": true, "XREADGROUP": true, "WAIT": true,
	"SELECT": true, "AUTH": true, "HELLO": true, "CLIENT": true, "QUIT": true, "RESET": true,
}

// toLua converts a reply as miniredis' scripting does: a nil reply is false.
func toLua(l *lua.LState, res any) lua.LValue {
	switch r := res.(type) {
	case nil:
		return lua.LFalse
	case int:
		return lua.LNumber(r)
	case int64:
		return lua.LNumber(r)
	case []byte:
		return lua.LString(r)
	case string:
		return lua.LString(r)
	case server.Simple:
		t := l.NewTable()
		t.RawSetString("ok", lua.LString(string(r)))
		return t
	case []any:
		t := l.CreateTable(len(r), 0)
		for i, e := range r {
			t.RawSetInt(i+1, toLua(l, e))
		}
		return t
	default:
		panic(fmt.Sprintf("sim: a reply of type %T in a script", res))
	}
}

// writeLua writes a script's result as Redis does: true is 1, false and nil
// are nil, a number is an integer, a table with err or ok an error or a
// status, any other table an array up to its first nil.
func writeLua(c *server.Peer, v lua.LValue) {
	switch t := v.(type) {
	case lua.LBool:
		if t {
			c.WriteInt(1)
		} else {
			c.WriteNull()
		}
	case lua.LNumber:
		c.WriteInt(int(t))
	case lua.LString:
		c.WriteBulk(string(t))
	case *lua.LTable:
		if e := t.RawGetString("err"); e != lua.LNil {
			c.WriteError(e.String())
			return
		}
		if s := t.RawGetString("ok"); s != lua.LNil {
			c.WriteInline(s.String())
			return
		}
		n := 0
		for t.RawGetInt(n+1) != lua.LNil {
			n++
		}
		c.WriteLen(n)
		for i := 1; i <= n; i++ {
			writeLua(c, t.RawGetInt(i))
		}
	default: // nil, and types Redis cannot send
		c.WriteNull()
	}
}

// errCompile is miniredis' error for a script that failed to compile or run.
func errCompile(err error) string {
	return "ERR Error compiling script (new function): " + err.Error()
}

func sha1Hex(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

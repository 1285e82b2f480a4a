package node_test

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/redlock-go/redlock/node"
)

// This file is the static half of TestGrantScriptsAreMarked: a small Lua
// scanner that finds every redis.call and redis.pcall of a script (comments
// stripped, strings in either quotes, any spacing) and flags, in a script
// not marked as a grant, each command that could write its lock key.

// luaCall is one redis.call or redis.pcall: its argument expressions, as
// source text with the surrounding white space trimmed.
type luaCall struct {
	fn   string // "call" or "pcall"
	args []string
}

// stripLuaComments returns src with its comments (-- to the end of the line,
// and --[[ ]] / --[==[ ]==] blocks) replaced by a space, strings (short and
// long) kept as they are; and the same text with every string's contents
// blanked out, where redis.call is searched (not inside a string).
func stripLuaComments(src string) (code, masked string) {
	var b, mb strings.Builder
	for i := 0; i < len(src); {
		switch {
		case strings.HasPrefix(src[i:], "--"):
			if n := longBracket(src[i+2:]); n > 0 {
				i += 2 + n
			} else {
				for i < len(src) && src[i] != '\n' {
					i++
				}
			}
			b.WriteByte(' ')
			mb.WriteByte(' ')
		case src[i] == '\'' || src[i] == '"' || src[i] == '[' && longBracket(src[i:]) > 0:
			n := luaString(src[i:])
			b.WriteString(src[i : i+n])
			mb.WriteString(strings.Repeat("_", n))
			i += n
		default:
			b.WriteByte(src[i])
			mb.WriteByte(src[i])
			i++
		}
	}
	return b.String(), mb.String()
}

// longBracket returns the length of the long bracket ([[...]], [=[...]=], …)
// that s starts with, up to its end (the whole of s if unterminated), or 0
// when s does not start with one.
func longBracket(s string) int {
	m := longOpen.FindStringSubmatch(s)
	if m == nil {
		return 0
	}
	end := "]" + m[1] + "]"
	if j := strings.Index(s[len(m[0]):], end); j >= 0 {
		return len(m[0]) + j + len(end)
	}
	return len(s)
}

// luaString returns the length of the string literal s starts with.
func luaString(s string) int {
	if n := longBracket(s); n > 0 {
		return n
	}
	q := s[0]
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case q, '\n':
			return i + 1
		}
	}
	return len(s)
}

var (
	longOpen   = regexp.MustCompile(`^\[(=*)\[`)
	redisFn    = regexp.MustCompile(`\bredis\s*(\.\s*(p?call)\b|\[)`)
	keysLit    = regexp.MustCompile(`^KEYS\s*\[\s*(\d+)\s*\]$`)
	keysAny    = regexp.MustCompile(`\bKEYS\s*\[\s*([^\]]*?)\s*\]`)
	identifier = regexp.MustCompile(`^[A-Za-z_]\w*$`)
)

// luaCalls returns the redis.call and redis.pcall invocations of src, and the
// places where redis.call or redis.pcall is used other than by a direct call
// (an alias such as `local c = redis.call`, or redis['call']), which hide the
// calls made through them.
func luaCalls(src string) (calls []luaCall, hidden []string) {
	code, masked := stripLuaComments(src)
	for _, m := range redisFn.FindAllStringSubmatchIndex(masked, -1) {
		rest := strings.TrimLeft(code[m[1]:], " \t\r\n")
		if m[4] < 0 || !strings.HasPrefix(rest, "(") {
			hidden = append(hidden, strings.TrimSpace(firstLine(code[m[0]:])))
			continue
		}
		calls = append(calls, luaCall{fn: code[m[4]:m[5]], args: splitArgs(rest)})
	}
	return calls, hidden
}

// splitArgs splits the parenthesised argument list s starts with at its
// top-level commas.
func splitArgs(s string) []string {
	var args []string
	depth, start := 0, 1
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\'' || c == '"' || c == '[' && longBracket(s[i:]) > 0:
			i += luaString(s[i:]) - 1
		case c == '(' || c == '{' || c == '[':
			depth++
		case c == ')' || c == '}' || c == ']':
			depth--
			if depth == 0 {
				return append(args, strings.TrimSpace(s[start:i]))
			}
		case c == ',' && depth == 1:
			args = append(args, strings.TrimSpace(s[start:i]))
			start = i + 1
		}
	}
	return append(args, strings.TrimSpace(s[start:]))
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// luaLiteral returns the value of a short string literal expression.
func luaLiteral(e string) (string, bool) {
	if len(e) < 2 || (e[0] != '\'' && e[0] != '"') || e[len(e)-1] != e[0] || luaString(e) != len(e) {
		return "", false
	}
	if e[0] == '\'' {
		e = `"` + strings.ReplaceAll(strings.ReplaceAll(e[1:len(e)-1], `\'`, `'`), `"`, `\"`) + `"`
	}
	v, err := strconv.Unquote(e)
	return v, err == nil
}

// harmlessCommands cannot create a key nor give it a value: reads, deletions,
// expiry changes (an unmarked script may delete or extend its lock; that is
// not a grant), and commands that take no key. Every other command is a
// write, whose destination is checked.
var harmlessCommands = map[string]bool{
	"GET": true, "MGET": true, "EXISTS": true, "TYPE": true, "TTL": true, "PTTL": true, "STRLEN": true,
	"DEL": true, "UNLINK": true, "EXPIRE": true, "PEXPIRE": true,
	"ZSCORE": true, "ZRANK": true, "ZRANGE": true, "ZRANGEBYSCORE": true, "ZCARD": true, "ZCOUNT": true, "ZREM": true,
	"ZREMRANGEBYSCORE": true,
	"PUBLISH":          true, "TIME": true,
}

// secondKeyWrites are the write commands whose second argument is (also) a
// destination key.
var secondKeyWrites = map[string]bool{
	"COPY": true, "RENAME": true, "RENAMENX": true, "SMOVE": true, "LMOVE": true, "BLMOVE": true,
	"RPOPLPUSH": true, "BRPOPLPUSH": true,
}

// keyVariables are the Lua variables that the scripts write to and that are
// known not to hold the lock key: the scanner cannot follow a variable to its
// value, so any other variable as a write's destination is flagged. Keep the
// list short: a lock key passed in one of these escapes the scan (not the
// behavioural probe). TestLockWritesScanner checks that each is still used.
var keyVariables = map[string]string{}

// lockWrites returns the calls of src that may write the lock key
// KEYS[lockPos] (lockPos 0: the script takes none, but may compute its name),
// each described: a write command (any command but harmlessCommands) whose
// destination is not a literal KEYS[j] with j ≠ lockPos nor one of
// keyVariables, or that names KEYS[lockPos] or a computed KEYS[…] in any
// argument; a command whose name is not a literal; and every hidden use of
// redis.call.
func lockWrites(src string, lockPos int) []string {
	calls, hidden := luaCalls(src)
	var out []string
	for _, h := range hidden {
		out = append(out, "redis.call used other than by a direct call (it hides what it runs): "+h)
	}
	for _, c := range calls {
		text := fmt.Sprintf("redis.%s(%s)", c.fn, strings.Join(c.args, ", "))
		if len(c.args) == 0 {
			continue
		}
		cmd, ok := luaLiteral(c.args[0])
		if !ok {
			out = append(out, "a command that is not a literal: "+text)
			continue
		}
		cmd = strings.ToUpper(cmd)
		if harmlessCommands[cmd] {
			continue
		}
		dests := c.args[1:min(2, len(c.args))]
		if secondKeyWrites[cmd] {
			dests = c.args[1:min(3, len(c.args))]
		}
		why := ""
		for _, d := range dests {
			if m := keysLit.FindStringSubmatch(d); m != nil {
				if j, _ := strconv.Atoi(m[1]); j == lockPos {
					why = "writes the lock key " + d
				}
				continue
			}
			if identifier.MatchString(d) && keyVariables[d] != "" {
				continue
			}
			why = "writes " + d + ", which may be the lock key"
		}
		for _, m := range keysAny.FindAllStringSubmatch(strings.Join(c.args[1:], ","), -1) {
			if j, err := strconv.Atoi(m[1]); (err != nil || j == lockPos) && why == "" {
				why = "names the lock key (or a computed KEYS index) " + m[0]
			}
		}
		if why != "" {
			out = append(out, why+": "+text)
		}
	}
	return out
}

// holderWrites returns the calls of src that may add a member to its
// container of holders KEYS[pos] (rw: the readers of a read-write lock),
// each described: those of lockWrites for the lock key KEYS[pos], but a
// ZADD on KEYS[pos] with XX as its first option (it only updates members
// already there: an extension).
func holderWrites(src string, pos int) []string {
	var out []string
	for _, w := range lockWrites(src, pos) {
		if !zaddXX.MatchString(w) {
			out = append(out, w)
		}
	}
	return out
}

var zaddXX = regexp.MustCompile(`(?i)^writes the lock key KEYS\s*\[\s*\d+\s*\]: redis\.p?call\(['"]zadd['"], KEYS\s*\[\s*\d+\s*\], ['"]xx['"], `)

// TestLockWritesScanner shows that the static check can fail: each mutation
// below is flagged, and only the harmless lines pass. It also checks that
// every allow-listed key variable is still written by some script.
func TestLockWritesScanner(t *testing.T) {
	flagged := []string{
		`redis.call('SET', KEYS[1], ARGV[1])`,
		`redis.call("SET", KEYS[1], ARGV[1])`,
		`redis.pcall('set', KEYS [ 1 ], ARGV[1], 'NX')`,
		`if #es > 0 then redis.call("SET", KEYS[1], ARGV[1]) end`,
		`redis.call('SET', lock, es[h].id, 'NX', 'PX', reserve)`,
		`redis . call ( 'GETSET' , KEYS[1], 'x')`,
		`redis.call('COPY', KEYS[2], KEYS[1])`,
		`redis.call('RENAME', KEYS[2], KEYS[1])`,
		`redis.call('SORT', KEYS[2], 'STORE', KEYS[1])`,
		`redis.call('SET', KEYS[1] .. '', 'x')`,
		`redis.call('SET', KEYS[#KEYS], 'x')`,
		`local k = KEYS[1]; redis.call('SETEX', k, 10, 'x')`,
		`local c = redis.call; c('SET', KEYS[1], 'x')`,
		`redis['call']('SET', KEYS[1], 'x')`,
		`local cmd = 'SET'; redis.call(cmd, KEYS[1], 'x')`,
		`redis.call([[SET]], KEYS[1], 'x')`,
		"redis.call('SET', -- the lock\n KEYS[1], 'x')",
	}
	for _, src := range flagged {
		assert.NotEmpty(t, lockWrites(src, 1), "the scanner missed a write of the lock key in %q", src)
	}
	passed := []string{
		`redis.call('GET', KEYS[1])`,
		`redis.call('DEL', KEYS[1])`,
		`redis.call('PEXPIRE', KEYS[1], ARGV[2])`,
		`redis.pcall('PUBLISH', KEYS[1] .. ':w:' .. "x", 'released')`,
		`redis.call('SET', KEYS[2], ARGV[1])`,
		`redis.call("ZADD", KEYS[3], 'NX', ARGV[4], ARGV[3])`,
		`-- redis.call('SET', KEYS[1], ARGV[1])`,
		"--[[ redis.call('SET', KEYS[1], ARGV[1]) ]] redis.call('GET', KEYS[1])",
		`local s = "redis.call('SET', KEYS[1], 'x')"`,
	}
	for _, src := range passed {
		assert.Empty(t, lockWrites(src, 1), "a harmless line is flagged: %q", src)
	}
	assert.NotEmpty(t, lockWrites(`redis.call('SET', KEYS[1], 'x')`, 1))
	assert.NotEmpty(t, lockWrites(`redis.call('SET', key, table.concat(b), 'PX', px)`, 1),
		"a write to a key held in a variable (none is allowed: keyVariables)")
	assert.Empty(t, lockWrites(`redis.call('SET', KEYS[1], 'x')`, 0), "a script without a lock key may write its keys")
	// rw: a container of holders (readers) may be purged and its members
	// updated (ZADD XX), not added to.
	for _, src := range []string{
		`redis.call('ZADD', KEYS[2], 10, 'x')`,
		`redis.call('ZADD', KEYS[2], 'NX', 10, 'x')`,
		`redis.call('ZADD', KEYS[2], 'GT', 'XX', 10, 'x')`,
		`redis.call('ZINCRBY', KEYS[2], 10, 'x')`,
		`redis.call('ZUNIONSTORE', KEYS[2], 1, KEYS[1])`,
	} {
		assert.NotEmpty(t, holderWrites(src, 2), "the scanner missed an addition to the holders in %q", src)
	}
	for _, src := range []string{
		`redis.call('ZADD', KEYS[2], 'XX', 10, 'x')`,
		`redis.call("zadd", KEYS[2], "xx", now + ttl, ARGV[1])`,
		`redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', 1)`,
		`redis.call('ZREM', KEYS[2], ARGV[1])`,
		`redis.call('PEXPIRE', KEYS[2], 10)`,
	} {
		assert.Empty(t, holderWrites(src, 2), "a harmless line is flagged: %q", src)
	}

	used := map[string]bool{}
	for _, s := range node.Scripts() {
		calls, _ := luaCalls(s.Source())
		for _, c := range calls {
			if len(c.args) > 1 {
				used[c.args[1]] = true
			}
		}
	}
	for v := range keyVariables {
		assert.True(t, used[v], "keyVariables allows %q, which no script writes any more: remove it", v)
	}
}

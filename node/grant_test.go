package node_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

// TestEveryLuaFileIsAScript: every .lua file of the package is a script that
// Scripts returns, or a fragment prepended to some: a script
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

// TestGrantScriptsAreMarked enumerates every script a node runs
// (node.Scripts) and checks that those that can create or overwrite the lock
// key with a new token are exactly those marked as grants (Script.Grants),
// which the restart quarantine refuses. It checks it two ways, each of which
// fails alone on a grant hidden in an unmarked script (TestLockWritesScanner
// shows the first failing on such lines; both failed on the hand-offs that an
// adversarial review added to the wake queue's scripts, since replaced by the
// one queue, and the second alone on a leave script that stored its queue in
// the lock key through a Lua function, which the first cannot follow):
//
//   - In the source (lockWrites): no unmarked script calls, with redis.call
//     or redis.pcall, a command that can give a key a value (any but reads,
//     deletions and expiries) on its lock key, or on a key it does not name
//     by a literal KEYS[j] (an expression, a Lua variable other than those of
//     keyVariables), in either quotes, with any spacing; nor hides a call
//     behind an alias. A script without a lock key cannot be marked.
//   - On a real redis-server that notifies every write of a key (keyspace
//     notifications), every script runs with the keys its Node method gives
//     it (observed by running each method once: observeLayouts), from each of
//     the states the queue and grant scripts leave behind (probeStates, built
//     by the Node methods: the lock free, held by another token or by the
//     probe's; the wake queue or the fair queue holding waiters, one listened
//     for on its channel by a client, one not, one with the probe's token as
//     its id; a release's reservation for a waiter the probe names; the lock
//     freed with waiters left), and with every combination of plausible
//     arguments (the probe's token, a waiter id, a number, an empty string,
//     and every literal the script compares an argument with) in as many
//     positions as it reads. During an unmarked script's run, every event on
//     the lock key but a deletion, an expiry, or an expire of a lock whose
//     token the run passed (an extension) is a grant; so is a lock key read
//     back afterwards that is new or holds another value. A marked script
//     must set and grant the lock key at least once, or the probe no longer
//     reaches it. Building the states, a queue's release must leave the lock
//     key free.
//
// A container of holders (the readers of a read-write lock: Script.Holders)
// is granted by adding to it, as the lock key by writing it: an unmarked
// script may not add to it (statically: any write but a ZADD XX update of
// members already there; on the server: a member live after the run that
// was not before, a lapsed reader revived included, from the reader states
// too), and a marked script that declares one must add a holder in the probe.
func TestGrantScriptsAreMarked(t *testing.T) {
	srv := redistest.Start(t)
	c, err := redis.Dial("tcp", srv.Addr())
	require.NoError(t, err)
	defer c.Close()
	for _, s := range node.Scripts() {
		_, err := c.Do("SCRIPT", "LOAD", s.Source())
		require.NoError(t, err)
	}
	layouts := observeLayouts(t, srv, c)
	p := newProber(t, srv, c)
	// rw: every container of holders that a script declares (Script.Holders)
	// is watched in every run: a new live member is a grant.
	for _, s := range node.Scripts() {
		if l, ok := layouts[s.Hash()]; ok && s.Holders() > 0 && s.Holders() <= len(l.keys) && !slices.Contains(p.holderKeys, l.keys[s.Holders()-1]) {
			p.holderKeys = append(p.holderKeys, l.keys[s.Holders()-1])
		}
	}

	grants := map[string]bool{}
	for _, s := range node.Scripts() {
		t.Run(s.Name(), func(t *testing.T) {
			if s.LockKey() == 0 {
				assert.False(t, s.Grants(), "%s takes no lock key, yet is marked as a grant script", s.Name())
			}
			require.LessOrEqual(t, s.LockKey(), s.Keys())
			if !s.Grants() {
				assert.Empty(t, lockWrites(s.Source(), s.LockKey()),
					"%s may write its lock key (KEYS[%d]) but is not marked as a grant script", s.Name(), s.LockKey())
				// rw: a container of holders (readers) is granted by adding to it.
				if s.Holders() > 0 {
					assert.Empty(t, holderWrites(s.Source(), s.Holders()),
						"%s may add to its holders (KEYS[%d]) but is not marked as a grant script", s.Name(), s.Holders())
				}
			}
			l, ok := layouts[s.Hash()]
			require.True(t, ok, "no Node method in layoutCalls runs %s: add the one that does", s.Name())
			require.Len(t, l.keys, s.Keys(), "%s: the Node method sends another number of keys than the script declares", s.Name())
			assert.Equal(t, s.LockKey(), slices.Index(l.keys, "")+1,
				"%s: the Node method sends the lock key in another position than Script.LockKey", s.Name())

			argc, fillers := scriptArgs(t, s, l.argc)
			argvs := combinations(fillers, argc)
			r := p.probe(t, s, l, argvs)
			grants[s.Name()] = r.granted > 0 || r.holderGrants > 0
			t.Logf("%d runs (%d arguments of %q, %d states): lock key events %v, %d granted, %d added holders, waiters woken %d times",
				r.runs, argc, fillers, len(probeStates), r.events, r.granted, r.holderGrants, r.woken)
			if s.Grants() && s.Holders() > 0 { // rw: grants holders (readers), not the lock key
				assert.Positive(t, r.holderGrants, "%s is marked as a grant script but never added a holder: is the probe still right?", s.Name())
				return
			}
			if s.Grants() {
				assert.Positive(t, r.events["set"], "%s is marked as a grant script but never set the lock key: is the probe still right?", s.Name())
				assert.Positive(t, r.granted, "%s is marked as a grant script but never granted the lock: is the probe still right?", s.Name())
				return
			}
			if len(r.grants) > 0 {
				t.Errorf("%s wrote its lock key (or added a holder) in %d runs (the first below): mark it newGrantScript", s.Name(), len(r.grants))
			}
			for _, g := range r.grants[:min(len(r.grants), 5)] {
				t.Errorf("%s: %s", s.Name(), g)
			}
		})
	}
	t.Logf("scripts that granted in the probe: %v", grants)
}

// Values the probe runs with.
const (
	probeToken = "probe-token" // the probe's token, and the id of a waiter (listened for)
	heldToken  = "holder"      // another client's token
	listened   = "grp/1"       // a waiter whose channel (group "grp") a client listens on
	unheard    = "gone/1"      // a waiter nobody listens for any more
	probeTTL   = time.Minute   // TTLs, leases and reservations of the states: nothing expires during the test
)

// layout is how a Node method calls a script: its keys, each as the suffix it
// adds to the lock key the method was given ("" for the lock key itself,
// ":fence" for the fence key the test passes), and how many arguments it
// sends (the most over the methods that run it).
type layout struct {
	keys []string
	argc int
}

// layoutCalls call every Node method that runs a script, on lock key k.
var layoutCalls = []func(ctx context.Context, n *node.Redis, k string) error{
	func(ctx context.Context, n *node.Redis, k string) error {
		_, err := n.Acquire(ctx, k, k+":fence", "t", time.Second)
		return err
	},
	func(ctx context.Context, n *node.Redis, k string) error {
		_, err := n.Extend(ctx, k, "t", time.Second)
		return err
	},
	func(ctx context.Context, n *node.Redis, k string) error { // holder metadata (meta.go)
		_, err := n.WriteMeta(ctx, k, "t", node.Meta{Term: 1, Since: time.Now(), Value: "v"}, time.Second)
		return err
	},
	func(ctx context.Context, n *node.Redis, k string) error {
		_, _, err := n.ReadMeta(ctx, k)
		return err
	},
	func(ctx context.Context, n *node.Redis, k string) error {
		_, err := n.WriteFence(ctx, k, k+":fence", "t", 1)
		return err
	},
	func(ctx context.Context, n *node.Redis, k string) error { return n.RaiseFence(ctx, k+":fence", 1) },
	func(ctx context.Context, n *node.Redis, k string) error {
		_, err := n.ReadFence(ctx, k, k+":fence", "t")
		return err
	},
	func(ctx context.Context, n *node.Redis, k string) error {
		_, _, err := n.CreateFence(ctx, k, k+":fence", "t", 1)
		return err
	},
	func(ctx context.Context, n *node.Redis, k string) error {
		_, err := n.Release(ctx, k, "t", true)
		return err
	},
	func(ctx context.Context, n *node.Redis, k string) error {
		_, err := n.AcquireFair(ctx, k, k+":fence", "t", time.Second, node.Waiter{ID: "w/1", Ticket: time.Now().UnixMicro(), Lease: time.Second})
		return err
	},
	func(ctx context.Context, n *node.Redis, k string) error {
		_, _, err := n.ReleaseFair(ctx, k, "t", "w/1", true)
		return err
	},
	func(ctx context.Context, n *node.Redis, k string) error { return n.LeaveQueue(ctx, k, "w/1") },
	// rw: read-write locks.
	func(ctx context.Context, n *node.Redis, k string) error {
		_, err := n.AcquireRead(ctx, k, "r", time.Second)
		return err
	},
	func(ctx context.Context, n *node.Redis, k string) error {
		_, err := n.ExtendRead(ctx, k, "r", time.Second)
		return err
	},
	func(ctx context.Context, n *node.Redis, k string) error {
		_, err := n.ReleaseRead(ctx, k, "r", true)
		return err
	},
	func(ctx context.Context, n *node.Redis, k string) error {
		_, err := n.AcquireWrite(ctx, k, k+":fence", "t", time.Second, "w", time.Second)
		return err
	},
	func(ctx context.Context, n *node.Redis, k string) error {
		_, err := n.LeaveWrite(ctx, k, "w")
		return err
	},
}

// observeLayouts runs layoutCalls with the server logging every command
// (SLOWLOG with a threshold of 0) and returns, by script SHA-1, the keys and
// argument count the methods sent.
func observeLayouts(t *testing.T, srv *redistest.Server, c redis.Conn) map[string]layout {
	t.Helper()
	n, err := node.Dial(srv.URL())
	require.NoError(t, err)
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, cmd := range [][]any{
		{"CONFIG", "SET", "slowlog-max-len", 1024}, {"CONFIG", "SET", "slowlog-log-slower-than", 0}, {"SLOWLOG", "RESET"},
	} {
		_, err := c.Do(cmd[0].(string), cmd[1:]...)
		require.NoError(t, err)
	}
	const k = "layout:L"
	for _, call := range layoutCalls {
		require.NoError(t, call(ctx, n, k))
	}
	entries, err := redis.Values(c.Do("SLOWLOG", "GET", 1024))
	require.NoError(t, err)
	_, err = c.Do("CONFIG", "SET", "slowlog-log-slower-than", 10000)
	require.NoError(t, err)
	out := map[string]layout{}
	for _, e := range entries {
		fields, err := redis.Values(e, nil)
		require.NoError(t, err)
		args, err := redis.Strings(fields[3], nil)
		require.NoError(t, err)
		if !strings.EqualFold(args[0], "EVALSHA") {
			continue
		}
		nk, err := strconv.Atoi(args[2])
		require.NoError(t, err)
		var l layout
		for _, key := range args[3 : 3+nk] {
			require.True(t, strings.HasPrefix(key, k), "a Node method sent the key %q, not named after its lock key %q", key, k)
			l.keys = append(l.keys, strings.TrimPrefix(key, k))
		}
		l.argc = len(args) - 3 - nk
		if prev, ok := out[args[1]]; ok {
			require.Equal(t, prev.keys, l.keys, "two Node methods send a script different keys")
			l.argc = max(l.argc, prev.argc)
		}
		out[args[1]] = l
	}
	_, err = c.Do("FLUSHALL")
	require.NoError(t, err)
	return out
}

var (
	argvIndex   = regexp.MustCompile(`\bARGV\s*\[\s*(\d+)\s*\]`)
	argvAny     = regexp.MustCompile(`\bARGV\b`)
	argvCompare = regexp.MustCompile(`\bARGV\s*\[\s*\d+\s*\]\s*[=~]=\s*('[^'\\]*'|"[^"\\]*")|('[^'\\]*'|"[^"\\]*")\s*[=~]=\s*ARGV\b`)
)

// scriptArgs returns how many arguments the probe fills for s (as many as the
// Node methods send, or as the highest ARGV index s reads) and the values it
// tries in each: the probe's token, a waiter id, a number, an empty string,
// the time now in µs (a ticket), and every literal s compares an argument
// with.
func scriptArgs(t *testing.T, s node.Script, sent int) (int, []string) {
	t.Helper()
	code, masked := stripLuaComments(s.Source())
	n := sent
	for _, m := range argvIndex.FindAllStringSubmatch(masked, -1) {
		i, _ := strconv.Atoi(m[1])
		n = max(n, i)
	}
	require.Equal(t, len(argvAny.FindAllString(masked, -1)), len(argvIndex.FindAllString(masked, -1)),
		"%s reads ARGV other than by a literal index: the probe cannot tell how many arguments it takes", s.Name())
	// The time now in µs is a ticket a node queues (within node.TicketBound
	// of its clock).
	fillers := []string{probeToken, listened, "10000", "", strconv.FormatInt(time.Now().UnixMicro(), 10)}
	for _, m := range argvCompare.FindAllStringSubmatch(code, -1) {
		lit, _ := luaLiteral(m[1] + m[2])
		if !slices.Contains(fillers, lit) {
			fillers = append(fillers, lit)
		}
	}
	return n, fillers
}

// combinations returns every argument list of n values taken from fillers.
func combinations(fillers []string, n int) [][]any {
	out := [][]any{{}}
	for range n {
		var grown [][]any
		for _, prefix := range out {
			for _, f := range fillers {
				grown = append(grown, append(slices.Clone(prefix), f))
			}
		}
		out = grown
	}
	return out
}

// probeState is a state of a lock key and of the keys beside it, built on a
// template lock key by the Node methods, and copied to each run's keys.
type probeState struct {
	name   string
	holder string // what the lock key holds once built ("": free)
	build  []stateStep
}

// stateStep is a step of building a probe state on the lock key k, with the
// Node methods (n) or plain commands (c).
type stateStep = func(ctx context.Context, n *node.Redis, c redis.Conn, k string) error

// hold sets the lock key to v.
func hold(v string) stateStep {
	return func(_ context.Context, _ *node.Redis, c redis.Conn, k string) error {
		_, err := c.Do("SET", k, v, "PX", probeTTL.Milliseconds())
		return err
	}
}

// unlock deletes the lock key, waking nobody.
func unlock(_ context.Context, _ *node.Redis, c redis.Conn, k string) error {
	_, err := c.Do("DEL", k)
	return err
}

// queue has waiters ids (tickets now, in that order) attempt the lock, held: refused,
// they are queued.
func queue(ids ...string) stateStep {
	return func(ctx context.Context, n *node.Redis, _ redis.Conn, k string) error {
		for i, id := range ids {
			w := node.Waiter{ID: id, Ticket: time.Now().UnixMicro() + int64(i), Lease: probeTTL}
			a, err := n.AcquireFair(ctx, k, k+":fence", "t-"+id, probeTTL, w)
			if err == nil && a.OK {
				err = fmt.Errorf("waiter %s was granted a held lock", id)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
}

// release releases the lock held by heldToken with the queue's release,
// which wakes the head of the queue.
func release() stateStep {
	return func(ctx context.Context, n *node.Redis, c redis.Conn, k string) error {
		ok, _, err := n.ReleaseFair(ctx, k, heldToken, "", true)
		if err == nil && !ok {
			err = errors.New("the holder's release deleted nothing")
		}
		if err != nil {
			return err
		}
		if v, err := redis.String(c.Do("GET", k)); err == nil {
			return fmt.Errorf("the release left the lock key holding %q: it granted the lock", v)
		}
		return nil
	}
}

func steps(s ...stateStep) []stateStep { return s }

// probeStates are the states the probe runs every script from: the lock
// free, held by another token or by the probe's, alone or with the queue
// holding waiters (the probe's ids among them: one listened for, one not,
// and the probe's token), with the lock then freed without a wake-up, or
// released by the queue's release (which wakes the head), and held again. The unlock after a release deletes nothing, unless the
// release wrote the lock key (a failure reported while building): the probe
// still gets the state it means.
var probeStates = []probeState{
	{name: "free"},
	{name: "held", holder: heldToken, build: steps(hold(heldToken))},
	{name: "mine", holder: probeToken, build: steps(hold(probeToken))},
	{name: "fq-held", holder: heldToken, build: steps(hold(heldToken), queue(unheard, listened, probeToken))},
	{name: "fq-mine", holder: probeToken, build: steps(hold(heldToken), queue(unheard, listened, probeToken), hold(probeToken))},
	{name: "fq-free", build: steps(hold(heldToken), queue(unheard, listened, probeToken), unlock)},
	{name: "fq-released", build: steps(hold(heldToken), queue(listened, probeToken, unheard), release(), unlock)},
	// rw: readers (one of them the probe's token, or the probe's lapsed),
	// and a writer waiting for them (its mark).
	{name: "rd-held", build: steps(read(heldToken, probeTTL), read(probeToken, probeTTL))},
	{name: "rd-lapsed", build: steps(read(heldToken, probeTTL), read(probeToken, time.Millisecond))},
	{name: "rd-waiting", build: steps(read(heldToken, probeTTL), read(probeToken, probeTTL), waitWrite(listened))},
}

// read adds the reader token for ttl (rw).
func read(token string, ttl time.Duration) stateStep {
	return func(ctx context.Context, n *node.Redis, _ redis.Conn, k string) error {
		a, err := n.AcquireRead(ctx, k, token, ttl)
		if err == nil && !a.OK {
			err = fmt.Errorf("reader %s refused", token)
		}
		return err
	}
}

// waitWrite has the writer id attempt the write lock, refused by the
// readers: it leaves its mark (rw).
func waitWrite(id string) stateStep {
	return func(ctx context.Context, n *node.Redis, _ redis.Conn, k string) error {
		a, err := n.AcquireWrite(ctx, k, k+":fence", "t-"+id, probeTTL, id, probeTTL)
		if err == nil && a.OK {
			err = fmt.Errorf("writer %s granted while readers hold", id)
		}
		return err
	}
}

// prober runs scripts on a redis-server that notifies every write of a
// key (keyspace notifications), with a client listening on the channels of
// the waiters listened (and one on those of the probe's token).
type prober struct {
	c      redis.Conn       // the commands
	events redis.PubSubConn // the lock keys' events, and the marks around each batch of runs
	woken  atomic.Int64     // messages received on the waiters' channels
	synced chan string      // the sync messages the listener received (syncWoken)
	// templates: the keys (suffixes of the lock key) of each state, built
	// once on the lock key "t:<state>:L".
	templates map[string][]string
	holders   map[string]string // what each template's lock key holds ("": none)
	// holderKeys: the suffixes of the containers of holders (readers: rw),
	// whose new live members are grants.
	holderKeys []string
}

const (
	syncChannel = "probe:w:grp" // a waiter channel that the probe publishes on to sync with the listener
	markChannel = "probe:mark"
	lockEvents  = "__keyspace@0__:p:*:L" // the runs' lock keys are p:<script>:<state>:<run>:L
)

func newProber(t *testing.T, srv *redistest.Server, c redis.Conn) *prober {
	t.Helper()
	_, err := c.Do("CONFIG", "SET", "notify-keyspace-events", "KA") // K: keyspace channels; A: every event class
	require.NoError(t, err)
	p := &prober{c: c, templates: map[string][]string{}, holders: map[string]string{}, synced: make(chan string, 1)}

	// A client listening for the waiters listened, on their groups' channels
	// (a wake-up that finds nobody drops the waiter instead).
	lc, err := redis.Dial("tcp", srv.Addr())
	require.NoError(t, err)
	listener := redis.PubSubConn{Conn: lc}
	require.NoError(t, listener.PSubscribe("*:w:grp", "*:w:"+probeToken))
	for range 2 {
		_, ok := listener.Receive().(redis.Subscription)
		require.True(t, ok)
	}
	done, stop := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			switch m := listener.Receive().(type) {
			case error:
				return
			case redis.Message:
				if m.Channel == syncChannel {
					select {
					case p.synced <- string(m.Data):
					case <-stop: // the test is over
					}
				} else {
					p.woken.Add(1)
				}
			}
		}
	}()
	t.Cleanup(func() { close(stop); lc.Close(); <-done })

	ec, err := redis.DialTimeout("tcp", srv.Addr(), 5*time.Second, 30*time.Second, 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { ec.Close() })
	p.events = redis.PubSubConn{Conn: ec}
	require.NoError(t, p.events.PSubscribe(lockEvents))
	require.NoError(t, p.events.Subscribe(markChannel))
	for range 2 {
		_, ok := p.events.Receive().(redis.Subscription)
		require.True(t, ok)
	}

	n, err := node.Dial(srv.URL())
	require.NoError(t, err)
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, st := range probeStates {
		k := "t:" + st.name + ":L"
		for _, f := range st.build {
			// Not fatal either: a release that granted the lock is a
			// failure, but the last step (unlock) still frees it.
			assert.NoError(t, f(ctx, n, c, k), "state %s, built by the Node methods", st.name)
		}
		holder, err := redis.String(c.Do("GET", k))
		if errors.Is(err, redis.ErrNil) {
			err = nil
		}
		require.NoError(t, err)
		// Not fatal: the scripts are probed from the state as built, and
		// judged by what its lock key actually holds.
		assert.Equal(t, st.holder, holder, "state %s, built by the Node methods: the lock key holds another value: a queue or release method wrote it", st.name)
		p.holders[st.name] = holder
		keys, err := redis.Strings(c.Do("KEYS", k+"*"))
		require.NoError(t, err)
		for _, key := range keys {
			p.templates[st.name] = append(p.templates[st.name], strings.TrimPrefix(key, k))
		}
	}
	time.Sleep(10 * time.Millisecond) // rw: the lapsed reader's 1 ms lease is over
	return p
}

// probeResult is what the runs of a script did to their lock key.
type probeResult struct {
	runs    int
	events  map[string]int // the lock key's events, by name
	granted int            // runs after which the lock key held a new value
	woken   int64          // wake-ups the listening client received
	grants  []string       // the runs that wrote the lock key other than by deleting or extending it
	// holderGrants: runs after which a container of holders had a live
	// member it had not before (rw: a reader added, or a lapsed one revived).
	holderGrants int
}

// probe runs s, called as l, with each argv from each probe state, each run
// on keys of its own (p:<script>:<state>:<run>:L and the keys beside it, a
// copy of the state's template), and reports what the runs did to their lock
// key: the events notified between two marks published around the runs, and
// its value read back.
func (p *prober) probe(t *testing.T, s node.Script, l layout, argvs [][]any) probeResult {
	t.Helper()
	r := probeResult{events: map[string]int{}}
	woken := p.syncWoken(t, s.Name()+" before")
	for _, st := range probeStates {
		lock := func(i int) string { return fmt.Sprintf("p:%s:%s:%d:L", s.Name(), st.name, i) }
		holder := p.holders[st.name]
		since, live := p.liveHolders(t, "t:"+st.name+":L") // rw
		for i := range argvs {
			for _, suffix := range p.templates[st.name] {
				require.NoError(t, p.c.Send("COPY", "t:"+st.name+":L"+suffix, lock(i)+suffix))
			}
		}
		mark := s.Name() + " " + st.name
		require.NoError(t, p.c.Send("PUBLISH", markChannel, "begin "+mark))
		for i, argv := range argvs {
			args := []any{s.Hash(), s.Keys()}
			for _, suffix := range l.keys {
				args = append(args, lock(i)+suffix)
			}
			require.NoError(t, p.c.Send("EVALSHA", append(args, argv...)...))
		}
		require.NoError(t, p.c.Send("PUBLISH", markChannel, "end "+mark))
		for i := range argvs {
			require.NoError(t, p.c.Send("GET", lock(i)))
		}
		for i := range argvs { // rw: the holders live after the run
			for _, suffix := range p.holderKeys {
				require.NoError(t, p.c.Send("ZRANGEBYSCORE", lock(i)+suffix, since, "+inf"))
			}
		}
		require.NoError(t, p.c.Flush())
		for range len(argvs) * len(p.templates[st.name]) {
			copied, err := redis.Int(p.c.Receive())
			require.NoError(t, err)
			require.Equal(t, 1, copied)
		}
		_, err := p.c.Receive()
		require.NoError(t, err)
		for range argvs {
			_, _ = p.c.Receive() // a script may refuse arguments of the wrong shape: only what it wrote counts
		}
		_, err = p.c.Receive()
		require.NoError(t, err)
		after := make([]string, len(argvs))
		present := make([]bool, len(argvs))
		for i := range argvs {
			after[i], err = redis.String(p.c.Receive())
			present[i] = err == nil
			if errors.Is(err, redis.ErrNil) {
				err = nil
			}
			require.NoError(t, err)
		}
		added := make([][]string, len(argvs)) // rw: holders live after a run and not before
		for i := range argvs {
			for _, suffix := range p.holderKeys {
				members, err := redis.Strings(p.c.Receive())
				require.NoError(t, err)
				for _, m := range members {
					if !slices.Contains(live[suffix], m) {
						added[i] = append(added[i], suffix+" "+m)
					}
				}
			}
		}

		run := map[string]int{}
		for i := range argvs {
			run[lock(i)] = i
		}
		events := make([][]string, len(argvs))
		in := false
	receive:
		for {
			switch m := p.events.ReceiveWithTimeout(30 * time.Second).(type) {
			case error:
				require.NoError(t, m)
			case redis.Message:
				switch {
				case m.Channel == markChannel && string(m.Data) == "end "+mark:
					break receive
				case m.Channel == markChannel:
					in = string(m.Data) == "begin "+mark
				case in:
					if i, ok := run[strings.TrimPrefix(m.Channel, "__keyspace@0__:")]; ok {
						events[i] = append(events[i], string(m.Data))
					}
				}
			}
		}

		for i, argv := range argvs {
			r.runs++
			write := false
			for _, e := range events[i] {
				r.events[e]++
				// Deleting the key, its expiry, and extending the lock whose
				// token the run passed are no grants; every other event is a
				// write.
				write = write || e != "del" && e != "expired" && (e != "expire" || holder == "" || !slices.Contains(argv, any(holder)))
			}
			if present[i] && (holder == "" || after[i] != holder) {
				r.granted++
				write = true
			}
			if len(added[i]) > 0 {
				r.holderGrants++
				write = true
				events[i] = append(events[i], fmt.Sprintf("holders added %q", added[i]))
			}
			if write {
				then := "then no lock key"
				if present[i] {
					then = fmt.Sprintf("then the lock key held %q", after[i])
				}
				r.grants = append(r.grants, fmt.Sprintf("from state %s (lock key %q), ARGV %q: lock key events %v, %s",
					st.name, holder, argv, events[i], then))
			}
		}
	}
	r.woken = p.syncWoken(t, s.Name()) - woken
	return r
}

// liveHolders returns the node's time in ms, and the members of the
// containers of holders (p.holderKeys) beside the lock key k whose lease
// ends after it (rw).
func (p *prober) liveHolders(t *testing.T, k string) (since int64, live map[string][]string) {
	t.Helper()
	now, err := redis.Int64s(p.c.Do("TIME"))
	require.NoError(t, err)
	since = now[0]*1000 + now[1]/1000
	live = map[string][]string{}
	for _, suffix := range p.holderKeys {
		live[suffix], err = redis.Strings(p.c.Do("ZRANGEBYSCORE", k+suffix, since, "+inf"))
		require.NoError(t, err)
	}
	return since, live
}

// syncWoken returns how many wake-ups the listener received, once it has
// received every message published so far.
func (p *prober) syncWoken(t *testing.T, mark string) int64 {
	t.Helper()
	_, err := p.c.Do("PUBLISH", syncChannel, mark)
	require.NoError(t, err)
	select {
	case got := <-p.synced:
		require.Equal(t, mark, got)
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the listener did not receive its sync message")
	}
	return p.woken.Load()
}

// grantCalls drives every script marked as a grant through the Node method
// that runs it.
var grantCalls = map[string][]func(ctx context.Context, n *node.Redis, key string) (node.Acquired, error){
	"acquire": {
		func(ctx context.Context, n *node.Redis, key string) (node.Acquired, error) {
			return n.Acquire(ctx, key, key+":fence", "t-new", 10*time.Second)
		},
		// The same call with its arguments laid out once (the lock client's
		// path to a *node.Redis: lock.go acquireOn).
		func(ctx context.Context, n *node.Redis, key string) (node.Acquired, error) {
			var a node.LockArgs
			a.Init(key, key+":fence", "t-new", 10*time.Second, false)
			return n.AcquireArgs(ctx, &a)
		},
	},
	"fairacquire": {
		func(ctx context.Context, n *node.Redis, key string) (node.Acquired, error) {
			return n.AcquireFair(ctx, key, key+":fence", "t-new", 10*time.Second, node.Waiter{ID: "w/1", Ticket: time.Now().UnixMicro(), Lease: time.Second})
		},
		// Without the fence counter (the lock key again as KEYS[2]): a
		// waiter's attempt of a lock not fenced at once, since 6 December
		// 2026 the lock client's usual queued call.
		func(ctx context.Context, n *node.Redis, key string) (node.Acquired, error) {
			return n.AcquireFair(ctx, key, "", "t-new", 10*time.Second, node.Waiter{ID: "w/1", Ticket: time.Now().UnixMicro(), Lease: time.Second})
		},
	},
	// rw: a reader, a writer (waiting: it would leave a mark if refused).
	"rwread": {func(ctx context.Context, n *node.Redis, key string) (node.Acquired, error) {
		return n.AcquireRead(ctx, key, "r-new", 10*time.Second)
	}},
	"rwwrite": {func(ctx context.Context, n *node.Redis, key string) (node.Acquired, error) {
		return n.AcquireWrite(ctx, key, key+":fence", "t-new", 10*time.Second, "w", time.Second)
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
	// A context that can be cancelled sends through the connection's writer;
	// one that ends only at its deadline (context.Background, or the lock
	// client's rounds: node.DeadlineBound) sends a lone command on an idle
	// connection, written on the caller's goroutine (mux.go): both are asked.
	contexts := []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"writer", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 10*time.Second)
		}},
		{"lone", func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }},
	}
	for _, tc := range cases {
		for _, cx := range contexts {
			t.Run(tc.name+"/"+cx.name, func(t *testing.T) {
				t.Parallel()
				srv := redistest.Start(t)
				// The node must have been up longer than the quarantine (plus
				// the second by which Redis rounds its uptime) before the client
				// first connects, or the first connection quarantines it.
				srv.WaitUptime(d + time.Second)
				n, err := node.Dial(srv.URL(), node.WithRestartQuarantine(d))
				require.NoError(t, err)
				defer n.Close()
				ctx, cancel := cx.ctx()
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
}

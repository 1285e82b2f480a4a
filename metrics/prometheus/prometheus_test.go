package prometheus_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	redlockprom "github.com/redlock-go/redlock/metrics/prometheus"
	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

// samples flattens what g exports into name{label="value",...} → value, for
// counters, and name_count{...} → number of observations for histograms (their
// sums in name_sum{...}). Labels are sorted by name.
func samples(t testing.TB, g prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			pairs := make([]string, 0, len(m.GetLabel()))
			for _, lp := range m.GetLabel() {
				pairs = append(pairs, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
			}
			sort.Strings(pairs)
			labels := "{" + strings.Join(pairs, ",") + "}"
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				out[mf.GetName()+labels] = m.GetCounter().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[mf.GetName()+"_count"+labels] = float64(m.GetHistogram().GetSampleCount())
				out[mf.GetName()+"_sum"+labels] = m.GetHistogram().GetSampleSum()
			default:
				t.Fatalf("unexpected metric type %v of %s", mf.GetType(), mf.GetName())
			}
		}
	}
	return out
}

// withoutSums drops the histograms' sums (durations: not reproducible).
func withoutSums(m map[string]float64) map[string]float64 {
	out := make(map[string]float64, len(m))
	for k, v := range m {
		if !strings.Contains(k, "_sum{") {
			out[k] = v
		}
	}
	return out
}

func newRegistry(t testing.TB, c prometheus.Collector) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	return reg
}

// TestScriptedSequence runs a scripted sequence of lock operations on three real
// Redis nodes and checks every exported series.
func TestScriptedSequence(t *testing.T) {
	servers := redistest.StartN(t, 3)
	names := make([]string, len(servers))
	for i, s := range servers {
		var err error
		names[i], err = node.ParseURL(s.URL())
		require.NoError(t, err)
	}

	col := redlockprom.New()
	reg := newRegistry(t, col)
	hooks := col.Hooks()
	// cancelAfterAttempt, when set, is called after the next attempt: it ends a
	// Lock call after exactly one attempt.
	var cancelAfterAttempt atomic.Pointer[context.CancelFunc]
	onAttempt := hooks.OnAttempt
	hooks.OnAttempt = func(e redlock.AttemptEvent) {
		onAttempt(e)
		if cancel := cancelAfterAttempt.Swap(nil); cancel != nil {
			(*cancel)()
		}
	}
	// Node replies are counted per operation, so that each step can wait for
	// all of its replies: a call returns once a majority answered, and the last
	// node's command would otherwise race with the next step. They are also
	// logged, to explain a failure.
	var (
		step    atomic.Int32
		replyMu sync.Mutex
		replies = map[string]int{}
		events  []string
	)
	onNode := hooks.OnNodeReply
	hooks.OnNodeReply = func(e redlock.NodeReplyEvent) {
		onNode(e)
		replyMu.Lock()
		replies[e.Op]++
		events = append(events, fmt.Sprintf("step %d: %s %s ok=%v err=%v", step.Load(), e.Node, e.Op, e.OK, e.Err))
		replyMu.Unlock()
	}
	awaitReplies := func(op string, n int) {
		t.Helper()
		require.Eventually(t, func() bool {
			replyMu.Lock()
			defer replyMu.Unlock()
			return replies[op] >= n
		}, 10*time.Second, time.Millisecond, "%d replies to %s", n, op)
	}
	defer func() {
		if t.Failed() {
			replyMu.Lock()
			defer replyMu.Unlock()
			t.Log("node replies:\n" + strings.Join(events, "\n"))
		}
	}()

	client, err := redlock.Dial(redistest.URLs(servers), redlock.WithHooks(hooks), redlock.WithTTL(5*time.Second),
		redlock.WithNodeTimeout(2*time.Second))
	require.NoError(t, err)
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = client.Close()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	del := func(key string) {
		for _, s := range servers {
			_, err := s.Do("DEL", key)
			require.NoError(t, err)
		}
	}

	// 1. Acquired.
	step.Store(1)
	a, err := client.TryLock(ctx, "h")
	require.NoError(t, err)
	awaitReplies("acquire", 3)
	// 2. Conflict.
	step.Store(2)
	_, err = client.TryLock(ctx, "h")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	awaitReplies("acquire", 6)
	// 3. Lock gives up after one refused attempt (its context ends). It
	// is another client's, with the same hooks: a Lock call makes no
	// attempt while its own client holds the lock.
	step.Store(3)
	other, err := redlock.Dial(redistest.URLs(servers), redlock.WithHooks(hooks), redlock.WithTTL(5*time.Second),
		redlock.WithNodeTimeout(2*time.Second))
	require.NoError(t, err)
	lockCtx, lockCancel := context.WithTimeout(ctx, 10*time.Second)
	cancelAfterAttempt.Store(&lockCancel)
	_, err = other.Lock(lockCtx, "h")
	lockCancel()
	require.NoError(t, other.Close())
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.ErrorIs(t, lockCtx.Err(), context.Canceled, "ended by the hook, not by its timeout")
	awaitReplies("acquire", 9)
	// 4. Extended.
	step.Store(4)
	require.NoError(t, a.Extend(ctx))
	awaitReplies("extend", 3)
	// 5. Released.
	step.Store(5)
	require.NoError(t, a.Release(ctx))
	awaitReplies("release", 3)
	// 6. Acquired again.
	step.Store(6)
	b, err := client.TryLock(ctx, "h")
	require.NoError(t, err)
	awaitReplies("acquire", 12)
	// 7. Its keys vanish: Extend finds the lock lost.
	step.Store(7)
	del("redlock:{h}")
	require.ErrorIs(t, b.Extend(ctx), redlock.ErrLockLost)
	awaitReplies("extend", 6)
	// 8. Release finds it lost too.
	step.Store(8)
	require.ErrorIs(t, b.Release(ctx), redlock.ErrLockLost)
	awaitReplies("release", 6)
	// 9. Do loses its lock: its keys vanish, the first renewal is refused.
	step.Store(9)
	err = client.Do(ctx, "d", func(ctx context.Context) error {
		awaitReplies("acquire", 15)
		del("redlock:{d}")
		<-ctx.Done()
		return nil
	}, redlock.WithRenewEvery(200*time.Millisecond))
	require.ErrorIs(t, err, redlock.ErrLockLost)
	awaitReplies("extend", 9)
	awaitReplies("release", 9)
	// 10. Two nodes die under a held lock: its release cannot reach a majority.
	step.Store(10)
	k, err := client.TryLock(ctx, "k")
	require.NoError(t, err)
	awaitReplies("acquire", 18)
	servers[0].Kill()
	servers[1].Kill()
	require.ErrorIs(t, k.Release(ctx), redlock.ErrUnavailable)
	// 11. An attempt that no node refused, but too few granted.
	step.Store(11)
	_, err = client.TryLock(ctx, "k2")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)

	require.NoError(t, client.Close()) // stragglers' replies are in
	closed = true

	want := map[string]float64{
		`redlock_attempts_total{result="acquired"}`:             4, // 1, 6, 9, 10
		`redlock_attempts_total{result="conflict"}`:             2, // 2, 3
		`redlock_attempts_total{result="error"}`:                1, // 11
		`redlock_acquisitions_total{result="acquired"}`:         4,
		`redlock_acquisitions_total{result="failed"}`:           3, // 2, 3, 11
		`redlock_acquire_wait_seconds_count{result="acquired"}`: 4,
		`redlock_acquire_wait_seconds_count{result="failed"}`:   3,
		`redlock_extensions_total{result="ok"}`:                 1, // 4
		`redlock_extensions_total{result="failed"}`:             2, // 7, 9
		`redlock_renewal_failures_total{}`:                      1, // 9
		`redlock_lost_total{}`:                                  2, // 7, 9
		`redlock_releases_total{result="ok"}`:                   1, // 5
		`redlock_releases_total{result="lost"}`:                 2, // 8, 9
		`redlock_releases_total{result="error"}`:                1, // 10
		`redlock_hold_seconds_count{}`:                          4,
	}
	type nodeCounts struct{ ok, refused, failed int }
	perNode := map[string]map[string]nodeCounts{ // op → node → counts
		"acquire": {
			names[0]: {ok: 4, refused: 2, failed: 1},
			names[1]: {ok: 4, refused: 2, failed: 1},
			names[2]: {ok: 5, refused: 2},
		},
		"extend": {
			names[0]: {ok: 1, refused: 2},
			names[1]: {ok: 1, refused: 2},
			names[2]: {ok: 1, refused: 2},
		},
		"release": {
			names[0]: {ok: 1, refused: 2, failed: 1},
			names[1]: {ok: 1, refused: 2, failed: 1},
			names[2]: {ok: 2, refused: 2},
		},
	}
	for op, nodes := range perNode {
		for name, n := range nodes {
			for result, v := range map[string]int{"ok": n.ok, "refused": n.refused, "error": n.failed} {
				if v > 0 {
					want[fmt.Sprintf(`redlock_node_requests_total{node=%q,op=%q,result=%q}`, name, op, result)] = float64(v)
				}
			}
			want[fmt.Sprintf(`redlock_node_latency_seconds_count{node=%q,op=%q}`, name, op)] = float64(n.ok + n.refused + n.failed)
		}
	}

	got := samples(t, reg)
	// Do's renewal cancels its Extend once a majority refused: the third node's
	// answer to it may be "refused" or, cut short, "error" (context canceled).
	// Count such a cut as the refusal it would have been.
	cut := 0.0
	for _, name := range names {
		errKey := fmt.Sprintf(`redlock_node_requests_total{node=%q,op="extend",result="error"}`, name)
		if v, ok := got[errKey]; ok {
			cut += v
			got[fmt.Sprintf(`redlock_node_requests_total{node=%q,op="extend",result="refused"}`, name)] += v
			delete(got, errKey)
		}
	}
	assert.LessOrEqual(t, cut, 1.0, "at most the straggler of Do's renewal is cut short")
	assert.Equal(t, want, withoutSums(got))
	assert.Greater(t, got[`redlock_hold_seconds_sum{}`], 0.2, "Do held its lock past its first renewal")
	assert.Greater(t, got[`redlock_acquire_wait_seconds_sum{result="acquired"}`], 0.0)

	// The exposition format, help text included, of one family.
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP redlock_renewal_failures_total Failed renewals in Do (lock lost, or too few nodes answered).
# TYPE redlock_renewal_failures_total counter
redlock_renewal_failures_total 1
`), "redlock_renewal_failures_total"))
}

// TestFreshCollector checks the series exported before any event: every lock
// series at zero, no per-node series, and names that pass promlint.
func TestFreshCollector(t *testing.T) {
	col := redlockprom.New()
	reg := newRegistry(t, col)
	got := withoutSums(samples(t, reg))
	want := map[string]float64{}
	for _, k := range []string{
		`redlock_attempts_total{result="acquired"}`, `redlock_attempts_total{result="conflict"}`,
		`redlock_attempts_total{result="error"}`,
		`redlock_acquisitions_total{result="acquired"}`, `redlock_acquisitions_total{result="failed"}`,
		`redlock_acquire_wait_seconds_count{result="acquired"}`, `redlock_acquire_wait_seconds_count{result="failed"}`,
		`redlock_hold_seconds_count{}`,
		`redlock_extensions_total{result="ok"}`, `redlock_extensions_total{result="failed"}`,
		`redlock_renewal_failures_total{}`, `redlock_lost_total{}`,
		`redlock_releases_total{result="ok"}`, `redlock_releases_total{result="lost"}`,
		`redlock_releases_total{result="error"}`,
	} {
		want[k] = 0
	}
	assert.Equal(t, want, got)

	// The number of series that docs/observability.md gives.
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var text strings.Builder
	for _, mf := range mfs {
		_, err := expfmt.MetricFamilyToText(&text, mf)
		require.NoError(t, err)
	}
	series := 0
	for _, line := range strings.Split(strings.TrimSpace(text.String()), "\n") {
		if !strings.HasPrefix(line, "#") {
			series++
		}
	}
	assert.Equal(t, 68, series, text.String())

	// Feed one event of each kind so that the per-node families exist too.
	h := col.Hooks()
	h.OnNodeReply(redlock.NodeReplyEvent{Node: "n1:6379/0", Op: "acquire", OK: true, Latency: time.Millisecond})
	problems, err := testutil.CollectAndLint(col)
	require.NoError(t, err)
	assert.Empty(t, problems)
}

// TestClassification feeds events straight to the hooks and checks the result
// labels they land under.
func TestClassification(t *testing.T) {
	col := redlockprom.New()
	reg := newRegistry(t, col)
	h := col.Hooks()
	lost := &redlock.QuorumError{Op: "release", Kind: redlock.ErrLockLost}
	unavailable := &redlock.QuorumError{Op: "release", Kind: redlock.ErrUnavailable}

	h.OnAttempt(redlock.AttemptEvent{Resource: "r", Acquired: true, Agreed: 3})
	h.OnAttempt(redlock.AttemptEvent{Resource: "r", Agreed: 1, Refused: 2})
	h.OnAttempt(redlock.AttemptEvent{Resource: "r", Agreed: 1, Refused: 1, Failed: 1}) // refused by one: conflict
	h.OnAttempt(redlock.AttemptEvent{Resource: "r", Agreed: 1, Failed: 2})
	h.OnAttempt(redlock.AttemptEvent{Resource: "r", Agreed: 3}) // too late: no validity left
	h.OnAttempt(redlock.AttemptEvent{Resource: "r"})            // cut short by the context
	h.OnAcquire(redlock.AcquireEvent{Resource: "r", Acquired: true, Wait: 2 * time.Second, Attempts: 3})
	h.OnAcquire(redlock.AcquireEvent{Resource: "r", Wait: 500 * time.Millisecond, Err: redlock.ErrNotAcquired})
	h.OnExtend(redlock.ExtendEvent{Resource: "r", OK: true})
	h.OnExtend(redlock.ExtendEvent{Resource: "r", Err: unavailable})
	h.OnRenewalFailure(redlock.RenewalFailureEvent{Resource: "r", Err: unavailable})
	h.OnLost(redlock.LostEvent{Resource: "r", Err: lost})
	h.OnRelease(redlock.ReleaseEvent{Resource: "r", Held: 3 * time.Second})
	h.OnRelease(redlock.ReleaseEvent{Resource: "r", Held: time.Second, Err: fmt.Errorf("wrapped: %w", lost)})
	h.OnRelease(redlock.ReleaseEvent{Resource: "r", Held: time.Second, Err: unavailable})
	h.OnRelease(redlock.ReleaseEvent{Resource: "r", Held: time.Second, Err: redlock.ErrClosed})
	h.OnNodeReply(redlock.NodeReplyEvent{Node: "a:1/0", Op: "acquire", OK: true, Latency: time.Millisecond})
	h.OnNodeReply(redlock.NodeReplyEvent{Node: "a:1/0", Op: "acquire", Latency: time.Millisecond})
	h.OnNodeReply(redlock.NodeReplyEvent{Node: "a:1/0", Op: "acquire", Err: errors.New("timeout"), Latency: time.Second})
	h.OnNodeReply(redlock.NodeReplyEvent{Node: "b:1/0", Op: "fence", OK: true, Latency: 2 * time.Millisecond})

	got := samples(t, reg)
	want := map[string]float64{
		`redlock_attempts_total{result="acquired"}`:                               1,
		`redlock_attempts_total{result="conflict"}`:                               2,
		`redlock_attempts_total{result="error"}`:                                  3,
		`redlock_acquisitions_total{result="acquired"}`:                           1,
		`redlock_acquisitions_total{result="failed"}`:                             1,
		`redlock_acquire_wait_seconds_count{result="acquired"}`:                   1,
		`redlock_acquire_wait_seconds_sum{result="acquired"}`:                     2,
		`redlock_acquire_wait_seconds_count{result="failed"}`:                     1,
		`redlock_acquire_wait_seconds_sum{result="failed"}`:                       0.5,
		`redlock_hold_seconds_count{}`:                                            4,
		`redlock_hold_seconds_sum{}`:                                              6,
		`redlock_extensions_total{result="ok"}`:                                   1,
		`redlock_extensions_total{result="failed"}`:                               1,
		`redlock_renewal_failures_total{}`:                                        1,
		`redlock_lost_total{}`:                                                    1,
		`redlock_releases_total{result="ok"}`:                                     1,
		`redlock_releases_total{result="lost"}`:                                   1,
		`redlock_releases_total{result="error"}`:                                  2,
		`redlock_node_requests_total{node="a:1/0",op="acquire",result="ok"}`:      1,
		`redlock_node_requests_total{node="a:1/0",op="acquire",result="refused"}`: 1,
		`redlock_node_requests_total{node="a:1/0",op="acquire",result="error"}`:   1,
		`redlock_node_requests_total{node="b:1/0",op="fence",result="ok"}`:        1,
		`redlock_node_latency_seconds_count{node="a:1/0",op="acquire"}`:           3,
		`redlock_node_latency_seconds_sum{node="a:1/0",op="acquire"}`:             1.002,
		`redlock_node_latency_seconds_count{node="b:1/0",op="fence"}`:             1,
		`redlock_node_latency_seconds_sum{node="b:1/0",op="fence"}`:               0.002,
	}
	require.Len(t, got, len(want))
	for k, v := range want {
		assert.InDelta(t, v, got[k], 1e-9, k)
	}
}

// TestOptions checks the namespace, constant labels, resource label and
// buckets.
func TestOptions(t *testing.T) {
	kind := func(resource string) string {
		if strings.HasPrefix(resource, "report:") {
			return "report"
		}
		return "other"
	}
	col := redlockprom.New(
		redlockprom.WithNamespace("app_locks"),
		redlockprom.WithConstLabels(prometheus.Labels{"client": "billing"}),
		redlockprom.WithResourceLabel(kind),
		redlockprom.WithWaitBuckets(0.1, 1),
		redlockprom.WithHoldBuckets(1, 10, 100),
		redlockprom.WithLatencyBuckets(0.01),
	)
	reg := newRegistry(t, col)
	assert.Empty(t, withoutSums(samples(t, reg)), "with a resource label, no series before the first event")

	h := col.Hooks()
	h.OnAcquire(redlock.AcquireEvent{Resource: "report:2024-06-01", Acquired: true, Wait: 50 * time.Millisecond})
	h.OnAcquire(redlock.AcquireEvent{Resource: "report:2024-06-02", Acquired: true, Wait: 50 * time.Millisecond})
	h.OnAcquire(redlock.AcquireEvent{Resource: "user:42", Wait: 5 * time.Second})
	h.OnRelease(redlock.ReleaseEvent{Resource: "report:2024-06-01", Held: 20 * time.Second})
	h.OnNodeReply(redlock.NodeReplyEvent{Node: "a:1/0", Op: "release", OK: true, Latency: 5 * time.Millisecond})

	assert.Equal(t, map[string]float64{
		`app_locks_acquisitions_total{client="billing",resource="report",result="acquired"}`:         2,
		`app_locks_acquisitions_total{client="billing",resource="other",result="failed"}`:            1,
		`app_locks_acquire_wait_seconds_count{client="billing",resource="report",result="acquired"}`: 2,
		`app_locks_acquire_wait_seconds_count{client="billing",resource="other",result="failed"}`:    1,
		`app_locks_releases_total{client="billing",resource="report",result="ok"}`:                   1,
		`app_locks_hold_seconds_count{client="billing",resource="report"}`:                           1,
		`app_locks_node_requests_total{client="billing",node="a:1/0",op="release",result="ok"}`:      1,
		`app_locks_node_latency_seconds_count{client="billing",node="a:1/0",op="release"}`:           1,
	}, withoutSums(samples(t, reg)))

	mfs, err := reg.Gather()
	require.NoError(t, err)
	buckets := map[string][]float64{}
	for _, mf := range mfs {
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			for _, b := range mf.GetMetric()[0].GetHistogram().GetBucket() {
				buckets[mf.GetName()] = append(buckets[mf.GetName()], b.GetUpperBound())
			}
		}
	}
	assert.Equal(t, map[string][]float64{
		"app_locks_acquire_wait_seconds": {0.1, 1},
		"app_locks_hold_seconds":         {1, 10, 100},
		"app_locks_node_latency_seconds": {0.01},
	}, buckets)

	// A second collector with the same names needs labels of its own.
	reg2 := prometheus.NewRegistry()
	require.NoError(t, reg2.Register(redlockprom.New(redlockprom.WithConstLabels(prometheus.Labels{"client": "a"}))))
	var are prometheus.AlreadyRegisteredError
	require.ErrorAs(t, reg2.Register(redlockprom.New(redlockprom.WithConstLabels(prometheus.Labels{"client": "a"}))), &are)
	require.NoError(t, reg2.Register(redlockprom.New(redlockprom.WithConstLabels(prometheus.Labels{"client": "b"}))))
}

// TestConcurrentHooks fires every hook from many goroutines while the registry
// is scraped, for the race detector, and checks that no event was lost.
func TestConcurrentHooks(t *testing.T) {
	col := redlockprom.New(redlockprom.WithResourceLabel(func(r string) string { return r[:1] }))
	reg := newRegistry(t, col)
	h := col.Hooks()
	const workers, rounds = 8, 500
	stop := make(chan struct{})
	scraped := make(chan struct{})
	go func() {
		defer close(scraped)
		for {
			select {
			case <-stop:
				return
			default:
				_, _ = reg.Gather()
			}
		}
	}()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			res := fmt.Sprintf("%c:%d", 'a'+w%2, w)
			nodeName := fmt.Sprintf("n%d:6379/0", w%3)
			for i := range rounds {
				h.OnAttempt(redlock.AttemptEvent{Resource: res, Acquired: i%2 == 0, Refused: 1})
				h.OnAcquire(redlock.AcquireEvent{Resource: res, Acquired: true, Wait: time.Millisecond})
				h.OnNodeReply(redlock.NodeReplyEvent{Node: nodeName, Op: "acquire", OK: true, Latency: time.Millisecond})
				h.OnExtend(redlock.ExtendEvent{Resource: res, OK: true})
				h.OnRenewalFailure(redlock.RenewalFailureEvent{Resource: res})
				h.OnLost(redlock.LostEvent{Resource: res})
				h.OnRelease(redlock.ReleaseEvent{Resource: res, Held: time.Millisecond})
			}
		})
	}
	wg.Wait()
	close(stop)
	<-scraped

	got := withoutSums(samples(t, reg))
	half := float64(workers * rounds / 2) // per resource kind, a and b
	for _, r := range []string{"a", "b"} {
		assert.Equal(t, half/2, got[fmt.Sprintf(`redlock_attempts_total{resource=%q,result="acquired"}`, r)])
		assert.Equal(t, half/2, got[fmt.Sprintf(`redlock_attempts_total{resource=%q,result="conflict"}`, r)])
		assert.Equal(t, half, got[fmt.Sprintf(`redlock_acquisitions_total{resource=%q,result="acquired"}`, r)])
		assert.Equal(t, half, got[fmt.Sprintf(`redlock_extensions_total{resource=%q,result="ok"}`, r)])
		assert.Equal(t, half, got[fmt.Sprintf(`redlock_renewal_failures_total{resource=%q}`, r)])
		assert.Equal(t, half, got[fmt.Sprintf(`redlock_lost_total{resource=%q}`, r)])
		assert.Equal(t, half, got[fmt.Sprintf(`redlock_releases_total{resource=%q,result="ok"}`, r)])
		assert.Equal(t, half, got[fmt.Sprintf(`redlock_hold_seconds_count{resource=%q}`, r)])
	}
	var requests float64
	for k, v := range got {
		if strings.HasPrefix(k, "redlock_node_requests_total{") {
			requests += v
		}
	}
	assert.Equal(t, float64(workers*rounds), requests)
}

// TestConcurrentClient runs many lockers on real Redis nodes with one collector
// while the registry is scraped, and checks the totals agree with what the
// callers saw.
func TestConcurrentClient(t *testing.T) {
	servers := redistest.StartN(t, 3)
	col := redlockprom.New()
	reg := newRegistry(t, col)
	client, err := redlock.Dial(redistest.URLs(servers), redlock.WithHooks(col.Hooks()), redlock.WithTTL(5*time.Second))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	stop := make(chan struct{})
	scraped := make(chan struct{})
	go func() {
		defer close(scraped)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
				_, _ = reg.Gather()
			}
		}
	}()
	const workers, rounds = 6, 15
	var acquired, failed, released atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				res := fmt.Sprintf("c%d", (w+i)%3)
				var l *redlock.Lock
				var err error
				if i%2 == 0 {
					l, err = client.TryLock(ctx, res)
				} else {
					lctx, lcancel := context.WithTimeout(ctx, 2*time.Second)
					l, err = client.Lock(lctx, res)
					lcancel()
				}
				if err != nil {
					assert.ErrorIs(t, err, redlock.ErrNotAcquired)
					failed.Add(1)
					continue
				}
				acquired.Add(1)
				if assert.NoError(t, l.Release(ctx)) {
					released.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	<-scraped
	require.NoError(t, client.Close())

	got := withoutSums(samples(t, reg))
	assert.Equal(t, float64(workers*rounds), float64(acquired.Load()+failed.Load()))
	assert.Equal(t, float64(acquired.Load()), got[`redlock_acquisitions_total{result="acquired"}`])
	assert.Equal(t, float64(failed.Load()), got[`redlock_acquisitions_total{result="failed"}`])
	assert.Equal(t, float64(acquired.Load()), got[`redlock_attempts_total{result="acquired"}`])
	assert.Equal(t, float64(released.Load()), got[`redlock_releases_total{result="ok"}`])
	assert.Equal(t, float64(released.Load()), got[`redlock_hold_seconds_count{}`])
	assert.Equal(t, float64(workers*rounds), got[`redlock_acquire_wait_seconds_count{result="acquired"}`]+
		got[`redlock_acquire_wait_seconds_count{result="failed"}`])
	attempts := got[`redlock_attempts_total{result="acquired"}`] + got[`redlock_attempts_total{result="conflict"}`] +
		got[`redlock_attempts_total{result="error"}`]
	var acquireReplies, releaseReplies float64
	for k, v := range got {
		switch {
		case strings.HasPrefix(k, `redlock_node_requests_total{`) && strings.Contains(k, `op="acquire"`):
			acquireReplies += v
		case strings.HasPrefix(k, `redlock_node_requests_total{`) && strings.Contains(k, `op="release"`):
			releaseReplies += v
		}
	}
	assert.Equal(t, 3*attempts, acquireReplies, "every node's reply to every attempt")
	// Release asks the nodes whose acquisition had answered (at least a
	// majority); a straggler is released as its acquisition lands, unreported.
	assert.GreaterOrEqual(t, releaseReplies, 2*float64(released.Load()))
	assert.LessOrEqual(t, releaseReplies, 3*float64(released.Load()))
}

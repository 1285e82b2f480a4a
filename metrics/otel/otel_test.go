package otel_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/redlock-go/redlock"
	redlockotel "github.com/redlock-go/redlock/metrics/otel"
	"github.com/redlock-go/redlock/redistest"
)

// collect flattens what the reader holds into name{k=v,...} → value: sums for
// counters, counts (and name.sum) for histograms. Attributes are sorted.
func collect(t *testing.T, r *sdkmetric.ManualReader) (map[string]float64, map[string]string) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(context.Background(), &rm))
	out, units := map[string]float64{}, map[string]string{}
	key := func(name string, set attribute.Set) string {
		var kv []string
		for _, a := range set.ToSlice() {
			kv = append(kv, fmt.Sprintf("%s=%s", a.Key, a.Value.Emit()))
		}
		sort.Strings(kv)
		return name + "{" + strings.Join(kv, ",") + "}"
	}
	for _, sm := range rm.ScopeMetrics {
		assert.Equal(t, redlockotel.ScopeName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			units[m.Name] = m.Unit
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				assert.True(t, d.IsMonotonic)
				for _, p := range d.DataPoints {
					out[key(m.Name, p.Attributes)] += float64(p.Value)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[key(m.Name, p.Attributes)] += float64(p.Count)
					out[key(m.Name+".sum", p.Attributes)] += p.Sum
				}
			default:
				t.Fatalf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return out, units
}

func setup(t *testing.T, opts ...redlockotel.Option) (*redlock.Client, *sdkmetric.ManualReader, []*redistest.Server) {
	servers := redistest.StartN(t, 3)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := redlockotel.New(mp, opts...)
	require.NoError(t, err)
	c, err := redlock.Dial(redistest.URLs(servers), redlock.WithHooks(m.Hooks()), redlock.WithTTL(2*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c, reader, servers
}

// TestMetrics: a client's acquisitions, conflicts, extensions and releases on
// three real redis-servers are counted with the attribute values of the
// Prometheus adapter.
func TestMetrics(t *testing.T) {
	c, reader, servers := setup(t, redlockotel.WithAttributes(attribute.String("client", "a")))
	ctx := context.Background()
	l, err := c.TryLock(ctx, "report")
	require.NoError(t, err)
	_, err = c.TryLock(ctx, "report")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.NoError(t, l.Extend(ctx))
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, l.Release(ctx))
	require.NoError(t, c.Close()) // stragglers are in

	got, units := collect(t, reader)
	for k, v := range map[string]float64{
		"redlock.attempts{client=a,result=acquired}":     1,
		"redlock.attempts{client=a,result=conflict}":     1,
		"redlock.acquisitions{client=a,result=acquired}": 1,
		"redlock.acquisitions{client=a,result=failed}":   1,
		"redlock.acquire.wait{client=a,result=acquired}": 1,
		"redlock.acquire.wait{client=a,result=failed}":   1,
		"redlock.extensions{client=a,result=ok}":         1,
		"redlock.releases{client=a,result=ok}":           1,
		"redlock.hold{client=a}":                         1,
		"redlock.node.requests{client=a,node=" + strings.TrimPrefix(servers[0].URL(), "redis://") + "/0,op=acquire,result=ok}":      1,
		"redlock.node.requests{client=a,node=" + strings.TrimPrefix(servers[0].URL(), "redis://") + "/0,op=acquire,result=refused}": 1,
		"redlock.node.latency{client=a,node=" + strings.TrimPrefix(servers[0].URL(), "redis://") + "/0,op=release}":                 1,
	} {
		assert.Equal(t, v, got[k], k)
	}
	assert.Greater(t, got["redlock.hold.sum{client=a}"], 0.02)
	assert.Equal(t, "s", units["redlock.hold"])
	assert.Equal(t, "{attempt}", units["redlock.attempts"])
	for k := range got {
		assert.NotContains(t, k, "resource=", "no resource attribute by default")
	}
}

// TestResourceAttributeAndLoss: with WithResourceAttribute the mapped resource
// is an attribute; a release of a lock gone from every node counts as lost.
func TestResourceAttributeAndLoss(t *testing.T) {
	c, reader, servers := setup(t, redlockotel.WithResourceAttribute(func(r string) string {
		kind, _, _ := strings.Cut(r, ":")
		return kind
	}), redlockotel.WithPrefix("locks."))
	ctx := context.Background()
	l, err := c.TryLock(ctx, "report:2026-12-02")
	require.NoError(t, err)
	for _, s := range servers {
		_, err := s.Do("FLUSHALL")
		require.NoError(t, err)
	}
	err = l.Extend(ctx)
	require.True(t, errors.Is(err, redlock.ErrLockLost), "%v", err)
	require.Error(t, l.Release(ctx))
	require.NoError(t, c.Close())
	got, _ := collect(t, reader)
	for k, v := range map[string]float64{
		"locks.attempts{resource=report,result=acquired}": 1,
		"locks.extensions{resource=report,result=failed}": 1,
		"locks.lost{resource=report}":                     1,
		"locks.releases{resource=report,result=lost}":     1,
	} {
		assert.Equal(t, v, got[k], k)
	}
}

func TestNew(t *testing.T) {
	_, err := redlockotel.New(nil)
	assert.Error(t, err)
	m, err := redlockotel.New(sdkmetric.NewMeterProvider())
	require.NoError(t, err)
	h := m.Hooks()
	assert.NotNil(t, h.OnAttempt)
	assert.NotNil(t, h.OnRelease)
	assert.NotNil(t, h.OnNodeReply)
}

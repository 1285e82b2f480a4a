package goredis_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/goredis"
	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/nodetest"
	"github.com/redlock-go/redlock/redistest"
)

func failoverClient(t *testing.T, set *redistest.SentinelSet, q *goredis.Quarantine) *redis.Client {
	o := &redis.FailoverOptions{
		MasterName: redistest.SentinelMaster, SentinelAddrs: set.Sentinels,
		ContextTimeoutEnabled: true,
	}
	if q != nil {
		o.OnConnect = q.OnConnect
	}
	c := redis.NewFailoverClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestSentinel: a FailoverClient over real redis-sentinel processes passes the
// suite; after a forced failover in which the new primary lacks a lock key, no
// client gets that lock from the node while the quarantine lasts, whether it
// connected before the failover or starts after it; afterwards it does.
func TestSentinel(t *testing.T) {
	// Not parallel, unlike the others: a failover test (in CI run p1 of 5
	// December 2026, on a machine loaded beside it, TestClusterFailover's
	// control client did not see the new primary within 10 s).
	set := redistest.StartSentinel(t, 1, 3)
	started := time.Now()
	t.Run("suite", func(t *testing.T) {
		nodetest.Run(t, func(t *testing.T) node.Node {
			return newNode(t, failoverClient(t, set, nil))
		})
	})

	const d = 4 * time.Second
	time.Sleep(time.Until(started.Add(d + 1100*time.Millisecond))) // the servers are not fresh
	quarantined := func(t *testing.T) (*goredis.Quarantine, *goredis.Node) {
		q, err := goredis.NewQuarantine(d)
		require.NoError(t, err)
		return q, newNode(t, failoverClient(t, set, q), goredis.WithQuarantine(q))
	}
	_, holder := quarantined(t)
	_, other := quarantined(t)
	control := newNode(t, failoverClient(t, set, nil)) // no quarantine
	a, err := acquire(t, holder, "res", "holder")
	require.NoError(t, err)
	require.True(t, a.OK)
	a, err = acquire(t, other, "res", "other")
	require.NoError(t, err, "connected before the failover")
	require.False(t, a.OK)

	old := set.MasterAddr()
	p := set.Failover()
	// The key had not reached the replica: the new primary does not have it.
	_, err = p.Do("DEL", "{res}")
	require.NoError(t, err)
	failedOver := time.Now()
	t.Logf("failover %s -> %s", old, p.Addr())

	_, late := quarantined(t) // starts after the failover
	refusals := nodetest.AwaitQuarantined(t, failedOver, "res", "other", other, late, other, late)
	assert.Len(t, refusals, 4)
	var until time.Time
	for _, qe := range refusals {
		assert.Equal(t, d, qe.Quarantine)
		if qe.Until.After(until) {
			until = qe.Until
		}
	}
	// Control: without the quarantine, the lock is granted a second time.
	require.True(t, nodetest.AwaitControlGrant(t, control, "res", "other", func() string {
		v, _ := p.Do("GET", "{res}")
		b, _ := v.([]byte)
		return string(b)
	}))
	assert.True(t, until.After(failedOver.Add(d-time.Second)), "quarantined for the full duration after the failover")
	time.Sleep(time.Until(until))
	a, err = acquire(t, other, "res", "other")
	require.NoError(t, err)
	assert.True(t, a.OK, "granted once the quarantine is over")
}

func clusterClient(t *testing.T, c *redistest.Cluster, q *goredis.Quarantine) *redis.ClusterClient {
	o := &redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true, MaxRedirects: 3}
	if q != nil {
		o.OnConnect = q.OnConnect
	}
	cc := redis.NewClusterClient(o)
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// TestCluster: a ClusterClient over a real 3-master cluster passes the suite
// (the lock and fence keys share a hash tag), and a restart of one master
// quarantines the node.
func TestCluster(t *testing.T) {
	t.Parallel() // its servers are its own; it mostly waits (failovers, quarantines)
	c := redistest.StartCluster(t, 3)
	started := time.Now()
	t.Run("suite", func(t *testing.T) {
		nodetest.Run(t, func(t *testing.T) node.Node {
			return newNode(t, clusterClient(t, c, nil))
		}, pause(c.Masters...))
	})

	const d = 3 * time.Second
	time.Sleep(time.Until(started.Add(d + 1100*time.Millisecond)))
	q, err := goredis.NewQuarantine(d)
	require.NoError(t, err)
	cc := clusterClient(t, c, q)
	n := newNode(t, cc, goredis.WithQuarantine(q))
	assert.Contains(t, n.Name(), "cluster/")
	keys := make([]string, 12)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
		a, err := acquire(t, n, keys[i], "holder")
		require.NoError(t, err)
		require.True(t, a.OK)
	}

	c.Masters[1].Restart() // its keys are gone; it rejoins with its slots (nodes.conf)
	require.Eventually(t, func() bool {
		info, err := c.Masters[1].Do("CLUSTER", "INFO")
		s, _ := info.([]byte)
		return err == nil && len(s) > 0 && string(s[:16]) == "cluster_state:ok"
	}, 20*time.Second, 50*time.Millisecond)
	restarted := time.Now()
	var qe *node.QuarantineError
	for len(keys) > 0 && time.Since(restarted) < 10*time.Second {
		a, err := acquire(t, n, keys[0], "other")
		require.False(t, a.OK, "a lock granted by a restarted master")
		if errors.As(err, &qe) {
			break
		}
		keys = append(keys[1:], keys[0])
		time.Sleep(20 * time.Millisecond)
	}
	require.NotNil(t, qe, "no quarantine after a master restarted")
	assert.NotEmpty(t, qe.PrevRunID)
	for _, k := range keys {
		_, err := acquire(t, n, k, "other")
		require.ErrorIs(t, err, node.ErrQuarantined, "one master quarantined quarantines the node")
	}
	time.Sleep(time.Until(qe.Until))
	require.NoError(t, cc.ForEachMaster(context.Background(), func(ctx context.Context, m *redis.Client) error {
		return m.Ping(ctx).Err()
	}))
	_, err = acquire(t, n, "fresh", "other")
	assert.NoError(t, err)
}

// TestClusterFailover: after a failover of one master of a cluster (the
// promoted replica stands for one that missed the lock key), neither a client
// that knew the old master nor one started after the failover grants the lock
// while the quarantine lasts; a control client without it does.
func TestClusterFailover(t *testing.T) {
	// Not parallel, unlike the others: a failover test (in CI run p1 of 5
	// December 2026, on a machine loaded beside it, TestClusterFailover's
	// control client did not see the new primary within 10 s).
	c := redistest.StartClusterWithReplicas(t, 3, true)
	started := time.Now()
	const d = 3 * time.Second
	time.Sleep(time.Until(started.Add(d + 1100*time.Millisecond)))
	quarantined := func(t *testing.T) (*redis.ClusterClient, *goredis.Node) {
		q, err := goredis.NewQuarantine(d)
		require.NoError(t, err)
		cc := clusterClient(t, c, q)
		return cc, newNode(t, cc, goredis.WithQuarantine(q))
	}
	cc, holder := quarantined(t)
	occ, other := quarantined(t)
	control := newNode(t, clusterClient(t, c, nil))
	// A connection to a replica, kept in the pool, would escape the check after
	// the replica's promotion: the quarantine refuses them.
	err := occ.ForEachShard(context.Background(), func(ctx context.Context, s *redis.Client) error {
		err := s.Ping(ctx).Err()
		if role, _ := s.Do(ctx, "ROLE").Slice(); err == nil && len(role) > 0 && role[0] == "slave" {
			t.Errorf("%s: a replica answered through a quarantined client", s.Options().Addr)
		}
		return nil
	})
	require.NoError(t, err)

	// A resource whose slot the master about to fail over serves.
	var res string
	for i := 0; res == ""; i++ {
		m, err := cc.MasterForKey(context.Background(), fmt.Sprintf("{r%d}", i))
		require.NoError(t, err)
		if m.Options().Addr == c.Masters[1].Addr() {
			res = fmt.Sprintf("r%d", i)
		}
	}
	a, err := acquire(t, holder, res, "holder")
	require.NoError(t, err)
	require.True(t, a.OK)
	a, err = acquire(t, other, res, "other")
	require.NoError(t, err)
	require.False(t, a.OK)

	c.Failover(1)
	_, err = c.Masters[1].Do("DEL", "{"+res+"}") // the write had not reached the replica
	require.NoError(t, err)
	failedOver := time.Now()
	_, late := quarantined(t)

	var until time.Time
	for _, qe := range nodetest.AwaitQuarantined(t, failedOver, res, "other", other, late) {
		if qe.Until.After(until) {
			until = qe.Until
		}
	}
	if !nodetest.AwaitControlGrant(t, control, res, "other", func() string {
		v, _ := c.Masters[1].Do("GET", "{"+res+"}")
		b, _ := v.([]byte)
		return string(b)
	}) {
		for _, s := range append(append([]*redistest.Server(nil), c.Masters...), c.Replicas...) {
			rc := redis.NewClient(&redis.Options{Addr: s.Addr()})
			nodes, err := rc.Do(context.Background(), "CLUSTER", "NODES").Text()
			_ = rc.Close()
			t.Logf("%s CLUSTER NODES (%v):\n%s", s.Addr(), err, nodes)
			v, err := s.Do("PTTL", "{"+res+"}")
			held, herr := s.Do("GET", "{"+res+"}")
			t.Logf("%s PTTL %v %v, GET %s %v", s.Addr(), v, err, held, herr)
		}
		t.FailNow()
	}
	assert.True(t, until.After(failedOver.Add(d-time.Second)), "quarantined for the full duration after the failover")
	time.Sleep(time.Until(until))
	a, err = acquire(t, other, res, "other")
	require.NoError(t, err)
	assert.True(t, a.OK, "granted once the quarantine is over")
}

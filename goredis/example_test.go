package goredis_test

import (
	"context"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/goredis"
	"github.com/redlock-go/redlock/node"
)

// Three independent Sentinel-managed primaries, each quarantined for 11s (the
// default TTL and its drift, rounded up) after a failover or a restart.
func Example() {
	var nodes []node.Node
	for _, name := range []string{"locks-a", "locks-b", "locks-c"} {
		q, err := goredis.NewQuarantine(11 * time.Second)
		if err != nil {
			log.Fatal(err)
		}
		rdb := redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName:            name,
			SentinelAddrs:         []string{"10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"},
			ContextTimeoutEnabled: true,
			OnConnect:             q.OnConnect,
		})
		defer rdb.Close()
		n, err := goredis.New(rdb, goredis.WithQuarantine(q), goredis.WithName(name))
		if err != nil {
			log.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	client, err := redlock.New(nodes)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	lock, err := client.TryLock(context.Background(), "nightly-report")
	if err != nil {
		return // redlock.ErrNotAcquired: someone else runs it
	}
	defer lock.Release(context.Background())
	// ... work, checking lock.Until()
}

// A Redis Cluster is one node: the lock's keys share a hash tag, so each lock
// lives on one master.
func ExampleNew_cluster() {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 []string{"10.0.1.1:6379", "10.0.1.2:6379", "10.0.1.3:6379"},
		ContextTimeoutEnabled: true,
	})
	defer rdb.Close()
	n, err := goredis.New(rdb, goredis.WithName("cluster-a"))
	if err != nil {
		log.Fatal(err)
	}
	_ = n // one of the client's independent nodes
}

// A guarded write: the resource refuses a token lower than one it accepted.
func ExampleWriteFenced() {
	rdb := redis.NewClient(&redis.Options{Addr: "10.0.0.9:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	var lock *redlock.Lock // held
	ctx := context.Background()
	token, err := lock.Fence(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if err := goredis.WriteFenced(ctx, rdb, "balance", token, "42"); err != nil {
		log.Print(err) // *fence.StaleError: a later holder wrote first
	}
}

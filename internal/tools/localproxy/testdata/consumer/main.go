// Command consumer is a module outside the repository that uses every public
// module of redlock as a user would: the core, goredis, rueidis,
// metrics/prometheus and metrics/otel. The consumer test builds and vets it
// against the local proxy; it is never run.
package main

import (
	"context"
	"errors"
	"log"
	"time"

	promclient "github.com/prometheus/client_golang/prometheus"
	goredislib "github.com/redis/go-redis/v9"
	rueidislib "github.com/redis/rueidis"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/fence"
	"github.com/redlock-go/redlock/goredis"
	"github.com/redlock-go/redlock/metrics/otel"
	"github.com/redlock-go/redlock/metrics/prometheus"
	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/rueidis"
)

func main() {
	ctx := context.Background()

	// Three independent nodes, through three clients: redigo (the core's),
	// go-redis and rueidis.
	direct, err := node.Dial("redis://127.0.0.1:6379")
	if err != nil {
		log.Fatal(err)
	}
	defer direct.Close()

	rdb := goredislib.NewClient(&goredislib.Options{Addr: "127.0.0.1:6380", ContextTimeoutEnabled: true})
	defer rdb.Close()
	q, err := goredis.NewQuarantine(11 * time.Second)
	if err != nil {
		log.Fatal(err)
	}
	viaGoRedis, err := goredis.New(rdb, goredis.WithQuarantine(q))
	if err != nil {
		log.Fatal(err)
	}

	rc, err := rueidislib.NewClient(rueidislib.ClientOption{InitAddress: []string{"127.0.0.1:6381"}})
	if err != nil {
		log.Fatal(err)
	}
	defer rc.Close()
	viaRueidis, err := rueidis.New(rc)
	if err != nil {
		log.Fatal(err)
	}

	// Metrics: Prometheus on this client, OpenTelemetry on a single-node one.
	col := prometheus.New()
	promclient.MustRegister(col)
	client, err := redlock.New([]node.Node{direct, viaGoRedis, viaRueidis},
		redlock.WithTTL(10*time.Second), redlock.WithHooks(col.Hooks()))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	om, err := otel.New(sdkmetric.NewMeterProvider())
	if err != nil {
		log.Fatal(err)
	}
	single, err := redlock.New([]node.Node{direct}, redlock.WithHooks(om.Hooks()))
	if err != nil {
		log.Fatal(err)
	}
	defer single.Close()

	var balance fence.Value[int]
	err = client.Do(ctx, "nightly-report", func(ctx context.Context) error {
		return ctx.Err()
	}, redlock.WithMaxHold(time.Minute))
	if errors.Is(err, redlock.ErrLockLost) {
		log.Print("lost the lock")
	}
	lock, err := single.Lock(ctx, "account-7", redlock.WithFence())
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(ctx)
	token, err := lock.Fence(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if err := balance.Store(token, 100); err != nil {
		log.Fatal(err)
	}
	if err := goredis.WriteFenced(ctx, rdb, "balance", token, "100"); err != nil {
		log.Fatal(err)
	}
	if err := rueidis.WriteFenced(ctx, rc, "balance", token, "100"); err != nil {
		log.Fatal(err)
	}
}

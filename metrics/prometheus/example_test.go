package prometheus_test

import (
	"log"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/redlock-go/redlock"
	redlockprom "github.com/redlock-go/redlock/metrics/prometheus"
)

// Register the collector, and give its hooks to the client.
func Example() {
	col := redlockprom.New()
	prometheus.MustRegister(col)

	client, err := redlock.Dial([]string{
		"redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379",
	}, redlock.WithHooks(col.Hooks()))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	http.Handle("/metrics", promhttp.Handler())
	// ... serve, and take locks with client.
}

// Label lock metrics with the kind of resource: the part of its name before
// the first colon, from a fixed list, so that the number of series stays
// bounded whatever the resource names.
func ExampleWithResourceLabel() {
	kinds := map[string]bool{"report": true, "invoice": true}
	col := redlockprom.New(redlockprom.WithResourceLabel(func(resource string) string {
		kind, _, _ := strings.Cut(resource, ":")
		if kinds[kind] {
			return kind
		}
		return "other"
	}))
	prometheus.MustRegister(col)
}

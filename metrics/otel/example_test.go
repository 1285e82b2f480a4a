package otel_test

import (
	"log"

	"go.opentelemetry.io/otel"

	"github.com/redlock-go/redlock"
	redlockotel "github.com/redlock-go/redlock/metrics/otel"
)

// Record the client's events on the global MeterProvider (set it up with the
// OpenTelemetry SDK and an exporter of your choice).
func Example() {
	m, err := redlockotel.New(otel.GetMeterProvider())
	if err != nil {
		log.Fatal(err)
	}
	client, err := redlock.Dial([]string{
		"redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379",
	}, redlock.WithHooks(m.Hooks()))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
}

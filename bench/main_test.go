package bench_test

import (
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/redlock-go/redlock/bench"
)

// requireEnv names the environment variable that turns a missing redis-server
// into a failure instead of a skip, as in the root module.
const requireEnv = "REDLOCK_REQUIRE_REDIS"

var (
	shared     *bench.Cluster
	sharedErr  error
	sharedOnce sync.Once
)

// cluster returns five redis-server processes shared by the tests and
// benchmarks of this package, started on first use and killed by TestMain.
func cluster(tb testing.TB) *bench.Cluster {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		msg := "redis-server not found on PATH (apt-get install -y redis-server)"
		if os.Getenv(requireEnv) == "1" {
			tb.Fatalf("%s; %s=1 makes this a failure", msg, requireEnv)
		}
		tb.Skipf("%s; set %s=1 to fail instead of skipping", msg, requireEnv)
	}
	sharedOnce.Do(func() { shared, sharedErr = bench.StartCluster("redis-server", 5) })
	if sharedErr != nil {
		tb.Fatal(sharedErr)
	}
	if err := shared.Flush(); err != nil {
		tb.Fatal(err)
	}
	return shared
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		shared.Close()
	}
	os.Exit(code)
}

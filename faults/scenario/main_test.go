package scenario_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/redlock-go/redlock/faults/harness"
)

// TestMain removes the clusters the tests kept for reuse (harness.WithReuse:
// each scenario starts on the cluster of an earlier one with the same
// options, reset, instead of spending about 3 s creating and removing one).
func TestMain(m *testing.M) {
	code := m.Run()
	if err := harness.RemoveKept(); err != nil {
		fmt.Fprintf(os.Stderr, "harness.RemoveKept: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

package scenario_test

import (
	"os"
	"testing"

	"github.com/redlock-go/redlock/faults/harness"
)

// TestMain removes the clusters the tests kept for reuse (harness.WithReuse:
// each scenario starts on the cluster of an earlier one with the same
// options, reset, instead of spending about 3 s creating and removing one).
func TestMain(m *testing.M) { os.Exit(harness.RunTests(m)) }

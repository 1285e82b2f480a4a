package harness_test

import (
	"os"
	"testing"

	"github.com/redlock-go/redlock/faults/harness"
)

// TestMain removes the clusters the tests kept for reuse (harness.WithReuse).
func TestMain(m *testing.M) { os.Exit(harness.RunTests(m)) }

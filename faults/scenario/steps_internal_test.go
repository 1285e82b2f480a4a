package scenario

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestAllAfterStep: a run's violations are the environment's only when
// every one began after the first wall-clock step.
func TestAllAfterStep(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	step := []clockStep{{After: at(100), At: at(105), By: 5 * time.Second}, {After: at(300), At: at(305), By: time.Second}}
	one := func(ms ...int) modelVerdict {
		v := modelVerdict{violations: len(ms)}
		for _, m := range ms {
			v.findings = append(v.findings, finding{text: "x", at: at(m)})
		}
		return v
	}
	for _, tc := range []struct {
		name  string
		steps []clockStep
		v     modelVerdict
		want  bool
	}{
		{"no step, a violation", nil, one(200), false},
		{"a step, no violation", step, one(), false},
		{"every violation after the first step", step, one(100, 150, 400), true},
		{"one violation before the first step", step, one(99, 150), false},
		{"between the steps still counts as after the first", step, one(200), true},
		{"a violation with no time", step, modelVerdict{violations: 1, findings: []finding{{text: "x"}}}, false},
		{"violations counted but none described", step, modelVerdict{violations: 2}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, allAfterStep(tc.steps, tc.v))
		})
	}
}

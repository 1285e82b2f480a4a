package redlock

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/redlock-go/redlock/node"
)

// QuorumError's message counts every node: those that agreed, refused, failed
// (with the kinds of failure), and those whose answer was not waited for or
// did not come in time, so that a healthy node is never counted as a no.
func TestQuorumErrorMessage(t *testing.T) {
	refused := fmt.Errorf("dial tcp 10.0.0.2:6379: connect: %w", syscall.ECONNREFUSED)
	timeout := fmt.Errorf("node: %w", context.DeadlineExceeded)
	tests := []struct {
		name    string
		qe      *QuorumError
		want    []string
		notWant []string
	}{
		{"agreed, refused, failed", &QuorumError{Op: "acquire", Kind: ErrNotAcquired, Nodes: 3, Need: 2, Agreed: 1, Refused: 1, Failed: 1,
			Errs: []*NodeError{{Node: "c:6379/0", Err: timeout}}},
			[]string{"redlock: lock not acquired: acquire on 3 nodes (2 needed): 1 agreed, 1 refused (held), 1 failed (timeout); node c:6379/0: node: context deadline exceeded"},
			nil},
		{"two failures decided it, the third not waited for", &QuorumError{Op: "acquire", Kind: ErrNotAcquired, Nodes: 3, Need: 2, Failed: 2,
			Errs: []*NodeError{{Node: "a:6379/0", Err: refused}, {Node: "b:6379/0", Err: timeout}}},
			[]string{"0 agreed, 2 failed (connection refused, timeout), 1 not waited for (the outcome was known without them)"},
			[]string{"0 of 3", "refused ("}},
		{"undecided: the rest did not answer in time", &QuorumError{Op: "acquire", Kind: ErrNotAcquired, Nodes: 5, Need: 3, Agreed: 2, Refused: 1,
			undecided: true, Cause: context.DeadlineExceeded},
			[]string{"2 agreed, 1 refused (held), 2 did not answer in time: context deadline exceeded"},
			[]string{"failed"}},
		{"extend refused", &QuorumError{Op: "extend", Kind: ErrLockLost, Nodes: 3, Need: 2, Refused: 2, Agreed: 1},
			[]string{"redlock: lock lost: extend on 3 nodes (2 needed): 1 agreed, 2 refused (not held)"}, nil},
		{"release, kinds", &QuorumError{Op: "release", Kind: ErrUnavailable, Nodes: 3, Need: 2, Agreed: 1, Failed: 2,
			Errs: []*NodeError{{Node: "a", Err: ErrNodeDown}, {Node: "b", Err: &node.QuarantineError{Until: time.Now()}}}},
			[]string{"1 agreed, 2 failed (node down, quarantined)"}, nil},
		{"authentication", &QuorumError{Op: "acquire", Kind: ErrNotAcquired, Nodes: 1, Need: 1, Failed: 1,
			Errs: []*NodeError{{Node: "a", Err: errors.New("node: AUTH on a:6379: WRONGPASS invalid username-password pair")}}},
			[]string{"0 agreed, 1 failed (authentication)"}, nil},
		{"too late", &QuorumError{Op: "acquire", Kind: ErrNotAcquired, Nodes: 3, Need: 2, Agreed: 3, Validity: -time.Millisecond},
			[]string{"3 agreed, but the lease had no validity left (-1ms)"}, nil},
		{"not sent", &QuorumError{Op: "fence", Kind: ErrLockLost, Nodes: 3, Need: 2, notSent: true, Cause: errReleased},
			[]string{"redlock: lock lost: fence: not sent to the 3 nodes: lock was released"}, []string{"agreed"}},
		{"one line", &QuorumError{Op: "acquire", Kind: ErrNotAcquired, Nodes: 1, Need: 1, Failed: 1,
			Errs: []*NodeError{{Node: "a", Err: errors.New("two\nlines")}}},
			[]string{"two lines"}, []string{"\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := tt.qe.Error()
			for _, w := range tt.want {
				assert.Contains(t, msg, w)
			}
			for _, w := range tt.notWant {
				assert.NotContains(t, msg, w)
			}
		})
	}
}

func TestJoinErrors(t *testing.T) {
	a, b, c := errors.New("a"), errors.New("b\nc"), errors.New("c")
	assert.NoError(t, joinErrors(nil, nil))
	assert.Same(t, a, joinErrors(nil, a))
	j := joinErrors(joinErrors(a, b), nil, c)
	assert.Equal(t, "a; b; c; c", j.Error())
	assert.ErrorIs(t, j, a)
	assert.ErrorIs(t, j, b)
	assert.ErrorIs(t, j, c)
}

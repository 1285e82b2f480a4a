package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// forward passes on a node's release notifications and grant announcements
// in their order: an announcement after a release makes the woken waiter drop
// its attempt (stagger reports it); one before the release is dropped.
func TestForwardOrdersAnnouncements(t *testing.T) {
	for _, c := range []struct {
		name      string
		takenLast bool
	}{{"taken after the release", true}, {"taken before the release", false}} {
		t.Run(c.name, func(t *testing.T) {
			rw := &releaseWatch{notify: make(chan struct{}, 1), taken: make(chan struct{}, 1), done: make(chan struct{})}
			released, taken := make(chan struct{}, 1), make(chan struct{}, 1)
			stopped := make(chan struct{})
			go func() { rw.forward(released, taken); close(stopped) }()
			if !c.takenLast {
				taken <- struct{}{}
				require.Eventually(t, func() bool { return len(taken) == 0 }, testWait, testTick)
			}
			released <- struct{}{}
			<-rw.notify // woken
			if c.takenLast {
				taken <- struct{}{}
				require.Eventually(t, func() bool { return len(rw.taken) == 1 }, testWait, testTick)
			}
			dropped, err := stagger(context.Background(), 0, rw.taken)
			require.NoError(t, err)
			require.Equal(t, c.takenLast, dropped)
			close(rw.done)
			<-stopped
		})
	}
}

const (
	testWait = 5 * time.Second
	testTick = time.Millisecond
)

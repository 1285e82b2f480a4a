package main

import (
	"time"

	"sync"

	"github.com/redlock-go/redlock"
)

// answers records every node's answers to the acquisition attempts of one
// redlock run (the library's OnAttempt and OnNodeReply hooks), stragglers
// included: an attempt is decided as soon as its outcome is known, and the
// answers that come after it can change what the exit status should say (a
// node down answers at once, the second node holding the lock a moment later).
type answers struct {
	index map[string]int // node name → position

	mu       sync.Mutex
	attempts int      // attempts that sent their round
	seen     []int    // per node: answers to acquisitions so far
	last     []answer // per node: the latest answer
	poke     chan struct{}
}

// answer is one node's answer to an acquisition.
type answer struct {
	ok  bool
	err error
}

func newAnswers(names []string) *answers {
	a := &answers{index: make(map[string]int, len(names)), seen: make([]int, len(names)),
		last: make([]answer, len(names)), poke: make(chan struct{}, 1)}
	for i, n := range names {
		a.index[n] = i
	}
	return a
}

// attempted is the OnAttempt hook.
func (a *answers) attempted(redlock.AttemptEvent) {
	a.mu.Lock()
	a.attempts++
	a.mu.Unlock()
}

// replied is the OnNodeReply hook.
func (a *answers) replied(e redlock.NodeReplyEvent) {
	i, ok := a.index[e.Node]
	if e.Op != "acquire" || !ok {
		return
	}
	a.mu.Lock()
	a.seen[i]++
	a.last[i] = answer{ok: e.OK, err: e.Err}
	a.mu.Unlock()
	select {
	case a.poke <- struct{}{}:
	default:
	}
}

// lastAttempt returns every node's answer to the last attempt, waiting up to
// timeout for the nodes that have not answered yet; those that still have not
// are reported with ok false. It returns ok false when no attempt was made.
func (a *answers) lastAttempt(timeout time.Duration) (last []answer, answered []bool, ok bool) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		a.mu.Lock()
		attempts, all := a.attempts, true
		answered = make([]bool, len(a.seen))
		for i, n := range a.seen {
			answered[i] = n >= attempts
			all = all && answered[i]
		}
		last = append([]answer(nil), a.last...)
		a.mu.Unlock()
		if attempts == 0 {
			return nil, nil, false
		}
		if all {
			return last, answered, true
		}
		select {
		case <-a.poke:
		case <-t.C:
			return last, answered, true
		}
	}
}

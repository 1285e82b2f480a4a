package node

import (
	"errors"
	"fmt"
	"sync"

	"github.com/gomodule/redigo/redis"
)

// ErrSameInstance is the error (reachable with errors.Is) of a node that turned
// out to be the same Redis instance as another node of its set (see Instances).
var ErrSameInstance = errors.New("node: same Redis instance as another node")

// SameInstanceError reports two nodes of one set that reached the same Redis
// process: different addresses (127.0.0.1 and localhost, a proxy, a DNS alias)
// of one instance. It wraps ErrSameInstance.
type SameInstanceError struct {
	Node  string // the node refused
	Other string // the node that reported the run id first
	RunID string // INFO server: run_id
}

func (e *SameInstanceError) Error() string {
	return fmt.Sprintf("node: %s is the same Redis instance as node %s (run_id %.8s…): it is refused, one instance is one vote; give independent instances",
		e.Node, e.Other, e.RunID)
}

// Unwrap returns ErrSameInstance.
func (e *SameInstanceError) Unwrap() error { return ErrSameInstance }

// Instances detects nodes of one set (the nodes of one lock client) that are the
// same Redis instance, by the run_id every Redis process draws at start-up. A
// node given WithInstances runs INFO server on every new connection and tells
// the set; when another node of the set already reported that run_id, the
// connection is refused with a *SameInstanceError, so that the node fails every
// call (a failed vote) instead of counting a second time. redlock.Dial gives its
// nodes one set. It is safe for concurrent use.
//
// A server that refuses INFO (an ACL without +info), or whose INFO server has no
// run_id (some Redis-compatible servers), is not checked. FromPool refuses
// WithInstances (its nodes do not dial). With WithRestartQuarantine too, one
// INFO server per new connection serves both checks.
type Instances struct {
	mu    sync.Mutex
	owner map[string]string // run id → the node that reported it
	runID map[string]string // node → the run id it last reported
}

// NewInstances returns an empty set.
func NewInstances() *Instances {
	return &Instances{owner: map[string]string{}, runID: map[string]string{}}
}

// Observe records that the node named name reached the process whose INFO server
// text is info. It fails with *SameInstanceError when another node of the set
// reported the same run_id, and with ErrUnexpectedReply when info has no run_id
// or uptime_in_seconds.
func (s *Instances) Observe(name, info string) error {
	runID, _, err := parseServerInfo(info)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if other, ok := s.owner[runID]; ok && other != name {
		return &SameInstanceError{Node: name, Other: other, RunID: runID}
	}
	if prev, ok := s.runID[name]; ok && prev != runID && s.owner[prev] == name {
		delete(s.owner, prev) // restarted, or another process behind the address
	}
	s.owner[runID], s.runID[name] = name, runID
	return nil
}

// WithInstances makes the node tell s the run_id of every connection it dials,
// and refuse connections to an instance that another node of s reached first
// (see Instances).
func WithInstances(s *Instances) Option {
	return optionFunc(func(c *config) error {
		if s == nil {
			return fmt.Errorf("%w: nil Instances", ErrInvalidOption)
		}
		c.instances = s
		return nil
	})
}

// dialed checks a new connection of the node named name, given the reply to
// the INFO server the dial ran (info, or infoErr). The caller closes the
// connection when it fails.
func (s *Instances) dialed(name, info string, infoErr error) error {
	var re redis.Error
	if errors.As(infoErr, &re) {
		return nil // INFO not allowed (ACL): no check
	}
	if infoErr != nil {
		return fmt.Errorf("node: same-instance check: INFO server: %w", infoErr)
	}
	if err := s.Observe(name, info); !errors.Is(err, ErrUnexpectedReply) {
		return err
	}
	return nil // a Redis-compatible server without run_id: no check
}

package node

import (
	"fmt"
	"time"
)

// DefaultTimeout bounds every call to a node when no Timeout option is given.
// The lock client's default (redlock.DefaultNodeTimeout) is this value.
const DefaultTimeout = 500 * time.Millisecond

// MaxTimeout is the longest per-call timeout accepted.
const MaxTimeout = time.Minute

// CheckTimeout reports whether d is a usable per-call timeout: in (0, MaxTimeout].
// WithTimeout, and the lock client's node timeout option, accept what it accepts.
func CheckTimeout(d time.Duration) error {
	if d <= 0 || d > MaxTimeout {
		return fmt.Errorf("%w: timeout %v must be in (0, %v]", ErrInvalidOption, d, MaxTimeout)
	}
	return nil
}

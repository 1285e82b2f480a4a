// Package fence helps a protected resource refuse writes from lock holders whose
// lease ran out: every write carries the holder's fencing token (redlock's
// Lock.Fence), the resource remembers the highest token it has accepted, and it
// refuses any write whose token is lower.
//
// A holder may write several times with its own token, so a token equal to the
// highest is accepted; tokens of different grants are never equal. Three forms
// are provided: Value, an in-memory fenced value; WriteRedis, an atomic guarded
// write to a Redis hash; and, in docs/fencing.md, the SQL pattern
// UPDATE ... SET fence = $t ... WHERE fence <= $t.
package fence

import (
	"errors"
	"fmt"
	"sync"
)

// ErrStale is the error (reachable with errors.Is) of a write refused because
// its token is lower than one already accepted.
var ErrStale = errors.New("fence: stale token")

// StaleError is a refused write: Token is what the writer presented, Highest the
// highest token the resource had accepted.
type StaleError struct {
	Token, Highest uint64
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("fence: stale token %d: %d already accepted", e.Token, e.Highest)
}

// Unwrap returns ErrStale.
func (e *StaleError) Unwrap() error { return ErrStale }

// Check returns nil if a write with token may follow one with highest, and a
// *StaleError otherwise.
func Check(highest, token uint64) error {
	if token < highest {
		return &StaleError{Token: token, Highest: highest}
	}
	return nil
}

// Value is an in-memory value that only accepts writes with a token at least as
// high as every token it has accepted. The zero value holds T's zero value and
// accepts any token. It is safe for concurrent use.
type Value[T any] struct {
	mu      sync.Mutex
	highest uint64
	v       T
}

// Store sets the value if token is not lower than the highest accepted token,
// and returns a *StaleError otherwise.
func (f *Value[T]) Store(token uint64, v T) error {
	return f.Update(token, func(T) T { return v })
}

// Update replaces the value with fn(old) if token is not lower than the highest
// accepted token; fn runs under the value's lock. It returns a *StaleError
// otherwise, without calling fn.
func (f *Value[T]) Update(token uint64, fn func(old T) T) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := Check(f.highest, token); err != nil {
		return err
	}
	f.highest = token
	f.v = fn(f.v)
	return nil
}

// Load returns the value and the highest token accepted so far.
func (f *Value[T]) Load() (T, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.v, f.highest
}

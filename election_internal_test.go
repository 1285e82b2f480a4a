package redlock

import "time"

// SetObserveResync sets Observe's resync period for a test (a long one shows
// that Observe sees changes through notifications, not by reading again),
// and returns the function that restores it.
func SetObserveResync(d time.Duration) (restore func()) {
	old := observeResync.Swap(int64(d))
	return func() { observeResync.Store(old) }
}

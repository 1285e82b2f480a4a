//go:build unix

package harness

import (
	"os"
	"path/filepath"
	"testing"
)

// TestHostLock checks that the clusters of one process share the host lock
// and that another holder (here another open file, as another process would
// have) cannot take it until the last cluster released it.
func TestHostLock(t *testing.T) {
	other := func() bool {
		t.Helper()
		f, err := os.OpenFile(filepath.Join(os.TempDir(), hostLockFile), os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		ok, err := tryLockFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			unlockFile(f)
		}
		return ok
	}

	// Clusters kept for reuse by the tests before hold a share of the lock.
	if err := RemoveKept(); err != nil {
		t.Fatal(err)
	}
	r1, first, err := acquireHost()
	if err != nil {
		t.Fatal(err)
	}
	r2, second, err := acquireHost() // a second cluster of this process: no wait
	if err != nil {
		t.Fatal(err)
	}
	if !first || second {
		t.Fatalf("first: %t, %t; want true, false", first, second)
	}
	if other() {
		t.Fatal("another holder took the lock while this process had clusters")
	}
	r1()
	r1() // idempotent
	if other() {
		t.Fatal("another holder took the lock while this process had a cluster")
	}
	r2()
	// Another test binary may take the lock at once, so check our side only.
	host.mu.Lock()
	defer host.mu.Unlock()
	if host.n != 0 || host.file != nil {
		t.Fatal("the lock was not released with the last cluster")
	}
}

package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// HostLockTimeout bounds how long Start waits for the clusters of other test
// binaries on this host to be torn down.
const HostLockTimeout = 10 * time.Minute

// hostLockFile is the lock file in os.TempDir that serializes clusters across
// test binaries.
const hostLockFile = "redlock-harness.lock"

// host serializes clusters across processes: go test runs the packages of a
// module in parallel, and two packages' clusters at once would double the
// containers (and the CPU load that timing-sensitive scenarios see). Within
// one process clusters may coexist: the process holds the lock while it has
// at least one cluster.
var host struct {
	mu   sync.Mutex
	n    int // clusters of this process
	file *os.File
}

// acquireHost waits until this process may run containers, and returns the
// function that gives the permission back. first reports that this process
// had no cluster: then no process on this host has one, and whatever carries
// the harness's label is a leftover (a test binary that panicked, or was
// killed, before its cleanups ran).
func acquireHost() (release func(), first bool, err error) {
	host.mu.Lock()
	defer host.mu.Unlock()
	if host.n == 0 {
		first = true
		f, err := os.OpenFile(filepath.Join(os.TempDir(), hostLockFile), os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			return nil, false, fmt.Errorf("host lock: %w", err)
		}
		deadline := time.Now().Add(HostLockTimeout)
		for {
			ok, err := tryLockFile(f)
			if err != nil {
				f.Close()
				return nil, false, fmt.Errorf("host lock %s: %w", f.Name(), err)
			}
			if ok {
				break
			}
			if time.Now().After(deadline) {
				f.Close()
				return nil, false, fmt.Errorf("host lock %s: still held by another test binary after %v", f.Name(), HostLockTimeout)
			}
			time.Sleep(50 * time.Millisecond) // poll interval, bounded by deadline
		}
		host.file = f
	}
	host.n++
	var once sync.Once
	return func() {
		once.Do(func() {
			host.mu.Lock()
			defer host.mu.Unlock()
			host.n--
			if host.n == 0 {
				unlockFile(host.file)
				host.file.Close()
				host.file = nil
			}
		})
	}, first, nil
}

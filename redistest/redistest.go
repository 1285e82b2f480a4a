// Package redistest starts real redis-server processes on free loopback ports for
// tests, and injects process faults into them: kill (SIGKILL), pause (SIGSTOP),
// resume (SIGCONT) and restart. The library's own tests use it; so can the tests
// of code that uses the library, against the redis-server on their PATH.
//
// When redis-server is not on PATH, Start skips the test with a message saying how
// to install it, unless REDLOCK_REQUIRE_REDIS=1, which turns the skip into a failure
// (CI sets it, so integration tests cannot silently vanish).
package redistest

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// RequireEnv names the environment variable that makes a missing redis-server a
// test failure instead of a skip.
const RequireEnv = "REDLOCK_REQUIRE_REDIS"

// Server is one redis-server process owned by a test: a Process whose failures
// fail the test, killed when the test ends.
type Server struct {
	*Process
	tb testing.TB
}

// Binary returns the path of redis-server, skipping (or failing, under
// REDLOCK_REQUIRE_REDIS=1) the test when it is missing.
func Binary(tb testing.TB) string {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		msg := "redis-server not found on PATH: integration tests need a real Redis (apt-get install -y redis-server)"
		if os.Getenv(RequireEnv) == "1" {
			tb.Fatalf("%s; %s=1 makes this a failure", msg, RequireEnv)
		}
		tb.Skipf("%s; set %s=1 to fail instead of skipping", msg, RequireEnv)
	}
	return bin
}

// Start starts a redis-server on a free loopback port with persistence off, plus
// extraArgs (redis-server command-line options, e.g. "--appendonly", "yes"). The
// server is killed when the test ends.
func Start(tb testing.TB, extraArgs ...string) *Server {
	tb.Helper()
	return StartEnv(tb, nil, extraArgs...)
}

// StartEnv is Start with env ("KEY=value" entries) added to the server's
// environment (see LaunchEnv).
func StartEnv(tb testing.TB, env []string, extraArgs ...string) *Server {
	tb.Helper()
	p, err := LaunchEnv(Binary(tb), tb.TempDir(), env, extraArgs...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Kill)
	return &Server{Process: p, tb: tb}
}

// StartN starts n servers.
func StartN(tb testing.TB, n int, extraArgs ...string) []*Server {
	tb.Helper()
	out := make([]*Server, n)
	for i := range out {
		out[i] = Start(tb, extraArgs...)
	}
	return out
}

// URLs returns the redis:// URLs of servers.
func URLs(servers []*Server) []string {
	out := make([]string, len(servers))
	for i, s := range servers {
		out[i] = s.URL()
	}
	return out
}

// Restart starts the server again on the same port (after Kill, or killing it
// first), failing the test if it cannot.
func (s *Server) Restart() {
	s.tb.Helper()
	if err := s.Process.Restart(); err != nil {
		s.tb.Fatalf("redistest: restart: %v", err)
	}
}

// Pause stops the process with SIGSTOP (see Process.Pause), failing the test if
// it cannot.
func (s *Server) Pause() {
	s.tb.Helper()
	if err := s.Process.Pause(); err != nil {
		s.tb.Fatal(err)
	}
}

// Resume continues a paused process, failing the test if it cannot.
func (s *Server) Resume() {
	s.tb.Helper()
	if err := s.Process.Resume(); err != nil {
		s.tb.Fatal(err)
	}
}

// Do runs one command on a fresh connection with a 2s timeout, failing the test on
// a connection error (Redis error replies are returned).
func (s *Server) Do(cmd string, args ...any) (any, error) {
	s.tb.Helper()
	c, err := s.Dial()
	if err != nil {
		s.tb.Fatalf("redistest: dial %s: %v", s.Addr(), err)
	}
	defer c.Close()
	return c.Do(cmd, args...)
}

// Keys returns the keys matching pattern.
func (s *Server) Keys(pattern string) []string {
	s.tb.Helper()
	keys, err := redis.Strings(s.Do("KEYS", pattern))
	if err != nil {
		s.tb.Fatalf("redistest: KEYS: %v", err)
	}
	return keys
}

// Calls returns how many times s has run each command since it started or
// its last CONFIG RESETSTAT (INFO commandstats: a script's own commands
// included), by lower-case name ("evalsha", "set", …); "info" counts the
// earlier calls of Calls too.
func (s *Server) Calls() map[string]int64 {
	s.tb.Helper()
	info, err := redis.String(s.Do("INFO", "commandstats"))
	if err != nil {
		s.tb.Fatalf("redistest: INFO commandstats: %v", err)
	}
	calls := map[string]int64{}
	for _, line := range strings.Split(info, "\r\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
		if err != nil {
			s.tb.Fatalf("redistest: INFO commandstats: %q: %v", line, err)
		}
		calls[name] = n
	}
	return calls
}

// WaitUptime waits until s has been up at least d by its INFO server (whole
// seconds, as a restart quarantine reads it).
func (s *Server) WaitUptime(d time.Duration) {
	s.tb.Helper()
	for {
		info, err := redis.String(s.Do("INFO", "server"))
		if err != nil {
			s.tb.Fatalf("redistest: INFO server: %v", err)
		}
		_, rest, _ := strings.Cut(info, "uptime_in_seconds:")
		var up int
		_, _ = fmt.Sscan(rest, &up)
		if time.Duration(up)*time.Second >= d {
			return
		}
		time.Sleep(100 * time.Millisecond) // the uptime is read off the server's clock: nothing to await
	}
}

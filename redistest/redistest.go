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
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// RequireEnv names the environment variable that makes a missing redis-server a
// test failure instead of a skip.
const RequireEnv = "REDLOCK_REQUIRE_REDIS"

// Server is one redis-server process owned by a test.
type Server struct {
	tb   testing.TB
	bin  string
	port int
	dir  string
	args []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	paused bool
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
	s := &Server{tb: tb, bin: Binary(tb), dir: tb.TempDir(), args: extraArgs}
	var err error
	for try := 0; try < 5; try++ {
		if s.port, err = freePort(); err != nil {
			continue
		}
		if err = s.start(); err == nil {
			break
		}
	}
	if err != nil {
		tb.Fatalf("redistest: cannot start redis-server: %v", err)
	}
	tb.Cleanup(s.stop)
	return s
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

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start runs the process and waits until it logs that it accepts connections.
func (s *Server) start() error {
	args := append([]string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--protected-mode", "no",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", s.dir,
		"--loglevel", "notice",
	}, s.args...)
	cmd := exec.Command(s.bin, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	ready := make(chan struct{})
	var logTail []string
	var logMu sync.Mutex
	go func() {
		sc := bufio.NewScanner(out)
		signalled := false
		for sc.Scan() {
			line := sc.Text()
			logMu.Lock()
			if logTail = append(logTail, line); len(logTail) > 20 {
				logTail = logTail[1:]
			}
			logMu.Unlock()
			if !signalled && strings.Contains(line, "Ready to accept connections") {
				signalled = true
				close(ready)
			}
		}
	}()
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	select {
	case <-ready:
	case <-exited:
		logMu.Lock()
		defer logMu.Unlock()
		return fmt.Errorf("redis-server on port %d exited: %s", s.port, strings.Join(logTail, " | "))
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		return fmt.Errorf("redis-server on port %d not ready within 10s", s.port)
	}
	s.mu.Lock()
	s.cmd, s.exited, s.paused = cmd, exited, false
	s.mu.Unlock()
	return nil
}

func (s *Server) stop() {
	s.mu.Lock()
	cmd, exited, paused := s.cmd, s.exited, s.paused
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	if paused {
		_ = cmd.Process.Signal(syscall.SIGCONT)
	}
	_ = cmd.Process.Kill()
	<-exited
}

// Addr returns host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL returns redis://host:port.
func (s *Server) URL() string { return "redis://" + s.Addr() }

// Kill sends SIGKILL and waits for the process to exit. Without persistence the
// data is gone.
func (s *Server) Kill() {
	s.tb.Helper()
	s.stop()
	s.mu.Lock()
	s.cmd = nil
	s.mu.Unlock()
}

// Restart starts the server again on the same port, after Kill.
func (s *Server) Restart() {
	s.tb.Helper()
	s.mu.Lock()
	running := s.cmd != nil
	s.mu.Unlock()
	if running {
		s.Kill()
	}
	if err := s.start(); err != nil {
		s.tb.Fatalf("redistest: restart: %v", err)
	}
}

// Pause stops the process with SIGSTOP: it keeps its sockets, accepts TCP
// connections through the kernel, but answers nothing until Resume.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP, true) }

// Resume continues a paused process with SIGCONT.
func (s *Server) Resume() { s.signal(syscall.SIGCONT, false) }

func (s *Server) signal(sig syscall.Signal, paused bool) {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		s.tb.Fatalf("redistest: %v on a server that is not running", sig)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.tb.Fatalf("redistest: %v: %v", sig, err)
	}
	s.paused = paused
}

// Do runs one command on a fresh connection with a 2s timeout, failing the test on
// a connection error (Redis error replies are returned).
func (s *Server) Do(cmd string, args ...any) (any, error) {
	s.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := redis.DialContext(ctx, "tcp", s.Addr(),
		redis.DialReadTimeout(2*time.Second), redis.DialWriteTimeout(2*time.Second))
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

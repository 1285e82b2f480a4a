package prometheus_test

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// requireRedisEnv makes a missing redis-server a failure instead of a skip.
const requireRedisEnv = "REDLOCK_REQUIRE_REDIS"

// redisServer is one redis-server process owned by a test.
type redisServer struct {
	tb     testing.TB
	port   int
	cmd    *exec.Cmd
	exited chan struct{}
	once   sync.Once
}

// startRedis starts n redis-servers on free loopback ports, without persistence,
// killed when the test ends. Without redis-server on PATH it skips the test, or
// fails it under REDLOCK_REQUIRE_REDIS=1.
func startRedis(tb testing.TB, n int) []*redisServer {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		msg := "redis-server not found on PATH: these tests need a real Redis (apt-get install -y redis-server)"
		if os.Getenv(requireRedisEnv) == "1" {
			tb.Fatalf("%s; %s=1 makes this a failure", msg, requireRedisEnv)
		}
		tb.Skipf("%s; set %s=1 to fail instead of skipping", msg, requireRedisEnv)
	}
	out := make([]*redisServer, n)
	for i := range out {
		var s *redisServer
		for try := 0; try < 5 && s == nil; try++ {
			s, err = launch(tb, bin)
		}
		if s == nil {
			tb.Fatalf("cannot start redis-server: %v", err)
		}
		tb.Cleanup(s.kill)
		out[i] = s
	}
	return out
}

func launch(tb testing.TB, bin string) (*redisServer, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()

	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", tb.TempDir())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &redisServer{tb: tb, port: port, cmd: cmd, exited: make(chan struct{})}
	ready := make(chan struct{})
	var mu sync.Mutex
	var tail []string
	go func() {
		sc := bufio.NewScanner(stdout)
		signalled := false
		for sc.Scan() {
			mu.Lock()
			if tail = append(tail, sc.Text()); len(tail) > 10 {
				tail = tail[1:]
			}
			mu.Unlock()
			if !signalled && strings.Contains(sc.Text(), "Ready to accept connections") {
				signalled = true
				close(ready)
			}
		}
	}()
	go func() {
		_ = cmd.Wait()
		close(s.exited)
	}()
	select {
	case <-ready:
		return s, nil
	case <-s.exited:
		mu.Lock()
		defer mu.Unlock()
		return nil, fmt.Errorf("redis-server on port %d exited: %s", port, strings.Join(tail, " | "))
	case <-time.After(10 * time.Second):
		s.kill()
		return nil, fmt.Errorf("redis-server on port %d not ready within 10s", port)
	}
}

// kill ends the process (SIGKILL) and waits for it; without persistence its
// data is gone. Killing twice is harmless.
func (s *redisServer) kill() {
	s.once.Do(func() {
		_ = s.cmd.Process.Kill()
		<-s.exited
	})
}

func (s *redisServer) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

func (s *redisServer) url() string { return "redis://" + s.addr() }

// do runs one command on a fresh connection.
func (s *redisServer) do(cmd string, args ...any) (any, error) {
	c, err := redis.Dial("tcp", s.addr(), redis.DialConnectTimeout(2*time.Second),
		redis.DialReadTimeout(2*time.Second), redis.DialWriteTimeout(2*time.Second))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Do(cmd, args...)
}

func urls(servers []*redisServer) []string {
	out := make([]string, len(servers))
	for i, s := range servers {
		out[i] = s.url()
	}
	return out
}

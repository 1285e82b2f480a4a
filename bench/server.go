package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Server is one redis-server process on a loopback port, started with
// persistence off (--save "" --appendonly no).
type Server struct {
	bin  string
	port int
	dir  string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	paused bool
	infos  int64 // INFO commands sent by Cluster.Commands since start
}

// StartServer starts redis-server (the binary bin, looked up on PATH when it has
// no slash) on a free 127.0.0.1 port and waits until it logs "Ready to accept
// connections". The caller must Close it; Cluster.Close does so for a cluster.
func StartServer(bin string) (*Server, error) {
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("bench: redis-server: %w", err)
	}
	dir, err := os.MkdirTemp("", "redlock-bench-")
	if err != nil {
		return nil, err
	}
	s := &Server{bin: path, dir: dir}
	for try := 0; try < 5; try++ {
		if s.port, err = freePort(); err != nil {
			continue
		}
		if err = s.start(); err == nil {
			return s, nil
		}
	}
	_ = os.RemoveAll(dir)
	return nil, err
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) start() error {
	cmd := exec.Command(s.bin,
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--protected-mode", "no",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", s.dir,
		"--loglevel", "notice")
	setDeathSignal(cmd)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return err
	}
	ready := make(chan struct{})
	exited := make(chan struct{})
	var (
		tailMu sync.Mutex
		tail   []string
	)
	go func() {
		sc := bufio.NewScanner(out)
		signalled := false
		for sc.Scan() {
			line := sc.Text()
			tailMu.Lock()
			if tail = append(tail, line); len(tail) > 10 {
				tail = tail[1:]
			}
			tailMu.Unlock()
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
		tailMu.Lock()
		defer tailMu.Unlock()
		return fmt.Errorf("bench: redis-server on port %d exited: %s", s.port, strings.Join(tail, " | "))
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		return fmt.Errorf("bench: redis-server on port %d not ready within 10s", s.port)
	}
	s.mu.Lock()
	s.cmd, s.exited, s.paused, s.infos = cmd, exited, false, 0
	s.mu.Unlock()
	return nil
}

// Addr returns the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL returns the server's redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr() }

// Pause stops the process with SIGSTOP: the kernel still accepts connections,
// but nothing is answered until Resume.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP, true) }

// Resume continues a paused process with SIGCONT.
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT, false) }

func (s *Server) signal(sig syscall.Signal, paused bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return fmt.Errorf("bench: %v: server %s is not running", sig, s.Addr())
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("bench: %v: %w", sig, err)
	}
	s.paused = paused
	return nil
}

// Kill sends SIGKILL (after SIGCONT if paused) and waits for the process to
// exit. It is idempotent.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, exited, paused := s.cmd, s.exited, s.paused
	s.cmd, s.paused = nil, false
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

// Close kills the server and removes its directory.
func (s *Server) Close() {
	s.Kill()
	_ = os.RemoveAll(s.dir)
}

// Restart starts the server again on the same port after Kill.
func (s *Server) Restart() error {
	s.Kill()
	return s.start()
}

// Running reports whether the process is running (not killed).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// Do runs one command on a fresh connection with a 2s timeout.
func (s *Server) Do(cmd string, args ...any) (any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := redis.DialContext(ctx, "tcp", s.Addr(),
		redis.DialReadTimeout(2*time.Second), redis.DialWriteTimeout(2*time.Second))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Do(cmd, args...)
}

// Version returns the server's version (INFO server, redis_version).
func (s *Server) Version() (string, error) {
	info, err := redis.String(s.Do("INFO", "server"))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v, nil
		}
	}
	return "", errors.New("bench: no redis_version in INFO")
}

// Cluster is a set of independent servers; a scenario at N nodes uses the first N.
type Cluster struct {
	Servers []*Server
}

// StartCluster starts n servers. On error, those already started are killed.
func StartCluster(bin string, n int) (*Cluster, error) {
	c := &Cluster{}
	for i := 0; i < n; i++ {
		s, err := StartServer(bin)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.Servers = append(c.Servers, s)
	}
	return c, nil
}

// URLs returns the redis:// URLs of the first n servers.
func (c *Cluster) URLs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = c.Servers[i].URL()
	}
	return out
}

// Addrs returns the host:port of the first n servers.
func (c *Cluster) Addrs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = c.Servers[i].Addr()
	}
	return out
}

// CPUTime returns the CPU time (user + system) the process has used, from
// /proc/<pid>/stat (Linux; clock-tick resolution, 10ms on most systems).
func (s *Server) CPUTime() (time.Duration, error) {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil {
		return 0, fmt.Errorf("bench: server %s is not running", s.Addr())
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: count fields after its ')'.
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b)[i+1:])
	if i < 0 || len(f) < 13 {
		return 0, fmt.Errorf("bench: unexpected /proc stat for %s", s.Addr())
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// clockTicks is USER_HZ, the unit of /proc CPU times: 100 on Linux.
const clockTicks = 100

// CPUTime returns the CPU time used so far by the running servers among the
// first n.
func (c *Cluster) CPUTime(n int) (time.Duration, error) {
	var total time.Duration
	for _, s := range c.Servers[:n] {
		if !s.Running() {
			continue
		}
		t, err := s.CPUTime()
		if err != nil {
			return 0, err
		}
		total += t
	}
	return total, nil
}

// Paused reports whether the process is stopped by Pause.
func (s *Server) Paused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.paused
}

// Flush empties every running server that is not paused (FLUSHALL), so that no
// scenario sees the keys of another.
func (c *Cluster) Flush() error {
	var errs []error
	for _, s := range c.Servers {
		if !s.Running() || s.Paused() {
			continue
		}
		if _, err := s.Do("FLUSHALL"); err != nil {
			errs = append(errs, fmt.Errorf("flush %s: %w", s.Addr(), err))
		}
	}
	return errors.Join(errs...)
}

// Commands returns the number of commands processed so far by the running,
// unpaused servers among the first n (INFO stats, total_commands_processed),
// not counting the INFO commands of this method itself.
func (c *Cluster) Commands(n int) (int64, error) {
	var total int64
	for _, s := range c.Servers[:n] {
		if !s.Running() || s.Paused() {
			continue
		}
		info, err := redis.String(s.Do("INFO", "stats"))
		if err != nil {
			return 0, err
		}
		found := false
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_commands_processed:"); ok {
				k, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return 0, fmt.Errorf("bench: total_commands_processed %q: %w", v, err)
				}
				total, found = total+k, true
			}
		}
		if !found {
			return 0, errors.New("bench: no total_commands_processed in INFO")
		}
		s.mu.Lock()
		total -= s.infos // earlier INFO calls of this method
		s.infos++
		s.mu.Unlock()
	}
	return total, nil
}

// Close kills every server and removes their directories.
func (c *Cluster) Close() {
	for _, s := range c.Servers {
		s.Close()
	}
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/redlock-go/redlock/redistest"
)

// Server is one redis-server process on a loopback port, started with
// persistence off (--save "" --appendonly no), with a directory of its own.
type Server struct {
	*redistest.Process
	dir string

	mu    sync.Mutex
	infos int64 // INFO commands sent by Cluster.Commands since start
}

// StartServer starts redis-server (the binary bin, looked up on PATH when it has
// no slash) on a free 127.0.0.1 port and waits until it logs "Ready to accept
// connections". The caller must Close it; Cluster.Close does so for a cluster.
func StartServer(bin string) (*Server, error) {
	dir, err := os.MkdirTemp("", "redlock-bench-")
	if err != nil {
		return nil, err
	}
	p, err := redistest.Launch(bin, dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("bench: %w", err)
	}
	return &Server{Process: p, dir: dir}, nil
}

// Close kills the server and removes its directory.
func (s *Server) Close() {
	s.Kill()
	_ = os.RemoveAll(s.dir)
}

// Restart starts the server again on the same port after Kill.
func (s *Server) Restart() error {
	if err := s.Process.Restart(); err != nil {
		return err
	}
	s.mu.Lock()
	s.infos = 0
	s.mu.Unlock()
	return nil
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

// Grow starts servers (the binary bin) until the cluster has n at least; the
// servers it had are left as they are. On error, those it started are
// killed.
func (c *Cluster) Grow(bin string, n int) error {
	var started []*Server
	for len(c.Servers)+len(started) < n {
		s, err := StartServer(bin)
		if err != nil {
			for _, s := range started {
				s.Close()
			}
			return err
		}
		started = append(started, s)
	}
	c.Servers = append(c.Servers, started...)
	return nil
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
	pid := s.Pid()
	if pid == 0 {
		return 0, fmt.Errorf("bench: server %s is not running", s.Addr())
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
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

package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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

// Process is one redis-server process on a loopback port, independent of any
// test: Server wraps it for tests, and programs (the benchmark command) use it
// directly. It is safe for concurrent use.
type Process struct {
	bin  string
	port int
	dir  string
	args []string
	env  []string // added to this process' environment

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	paused bool
}

// Launch starts redis-server (bin, looked up on PATH when it has no slash) on a
// free 127.0.0.1 port with persistence off, its files in dir, plus args
// (redis-server options such as "--appendonly", "yes"), and waits until it
// accepts connections. On Linux the process is killed if the caller dies.
func Launch(bin, dir string, args ...string) (*Process, error) {
	return LaunchEnv(bin, dir, nil, args...)
}

// LaunchEnv is Launch with env ("KEY=value" entries) added to the
// environment redis-server inherits, for this process and its restarts: for
// example an LD_PRELOAD library, without changing the test binary's own
// environment (t.Setenv), so that tests that need one may run in parallel.
func LaunchEnv(bin, dir string, env []string, args ...string) (*Process, error) {
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	p := &Process{bin: path, dir: dir, args: args, env: env}
	for try := 0; try < 5; try++ {
		if p.port, err = freePort(); err != nil {
			continue
		}
		if err = p.start(); err == nil {
			return p, nil
		}
	}
	return nil, fmt.Errorf("redistest: cannot start redis-server: %w", err)
}

// freePort returns a loopback port nothing listens on, never the same twice
// in a process, and outside the kernel's ephemeral range where it knows that
// range (Linux): a port from that range (what listening on port 0 gives)
// can be taken, once its server was killed, as the local port of any
// outgoing connection, and the server's Restart then failed with "Address
// already in use" (TestFenceMonotonicAcrossAOFRestarts, 6 December 2026).
func freePort() (int, error) {
	lo, hi := portRange()
	ports.mu.Lock()
	defer ports.mu.Unlock()
	if ports.given == nil {
		ports.given = map[int]bool{}
	}
	var err error
	for try := 0; try < 100; try++ {
		port := 0 // the kernel's choice, where the range is unknown
		if hi > lo {
			port = lo + rand.IntN(hi-lo)
			if ports.given[port] {
				continue
			}
		}
		var l net.Listener
		if l, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err != nil {
			continue
		}
		port = l.Addr().(*net.TCPAddr).Port
		l.Close()
		if ports.given[port] {
			continue
		}
		ports.given[port] = true
		return port, nil
	}
	if err == nil {
		err = errors.New("every port tried was given out before")
	}
	return 0, fmt.Errorf("redistest: no free port: %w", err)
}

// ports are those freePort gave out.
var ports struct {
	mu    sync.Mutex
	given map[int]bool
}

// portRange returns the ports [lo, hi) freePort chooses from: below the
// kernel's ephemeral range (/proc/sys/net/ipv4/ip_local_port_range) and
// from 15000, clear of the usual services' ports; lo == hi when the range is
// unknown or leaves too few.
func portRange() (lo, hi int) {
	const from, least = 15000, 1000
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0
	}
	first, err := strconv.Atoi(f[0])
	if err != nil || first-from < least {
		return 0, 0
	}
	return from, first
}

// start runs the process and waits until it logs that it accepts connections.
func (p *Process) start() error {
	args := append([]string{
		"--port", strconv.Itoa(p.port), "--bind", "127.0.0.1", "--protected-mode", "no",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", p.dir,
		"--loglevel", "notice",
	}, p.args...)
	cmd := exec.Command(p.bin, args...)
	if len(p.env) > 0 {
		cmd.Env = append(os.Environ(), p.env...)
	}
	setDeathSignal(cmd)
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
		return fmt.Errorf("redis-server on port %d exited: %s", p.port, strings.Join(logTail, " | "))
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		return fmt.Errorf("redis-server on port %d not ready within 10s", p.port)
	}
	p.mu.Lock()
	p.cmd, p.exited, p.paused = cmd, exited, false
	p.mu.Unlock()
	return nil
}

// Addr returns host:port.
func (p *Process) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port)) }

// URL returns redis://host:port.
func (p *Process) URL() string { return "redis://" + p.Addr() }

// Pid returns the process id, or 0 when it is not running.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Paused reports whether the process is stopped by Pause.
func (p *Process) Paused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}

// Running reports whether the process runs (was not killed).
func (p *Process) Running() bool { return p.Pid() != 0 }

// Kill sends SIGKILL (after SIGCONT if paused) and waits for the process to
// exit. Without persistence its data is gone. It is idempotent.
func (p *Process) Kill() {
	p.mu.Lock()
	cmd, exited, paused := p.cmd, p.exited, p.paused
	p.cmd, p.paused = nil, false
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	if paused {
		_ = cmd.Process.Signal(syscall.SIGCONT)
	}
	_ = cmd.Process.Kill()
	<-exited
}

// Restart kills the process if it runs and starts it again on the same port,
// with the same directory (an AOF file there is replayed).
func (p *Process) Restart() error {
	p.Kill()
	return p.start()
}

// Pause stops the process with SIGSTOP: it keeps its sockets, the kernel still
// accepts TCP connections, but nothing is answered until Resume.
func (p *Process) Pause() error { return p.signal(syscall.SIGSTOP, true) }

// Resume continues a paused process with SIGCONT.
func (p *Process) Resume() error { return p.signal(syscall.SIGCONT, false) }

func (p *Process) signal(sig syscall.Signal, paused bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("redistest: %v: server %s is not running", sig, p.Addr())
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("redistest: %v: %w", sig, err)
	}
	p.paused = paused
	return nil
}

// Dial opens a connection with 2s timeouts.
func (p *Process) Dial() (redis.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return redis.DialContext(ctx, "tcp", p.Addr(),
		redis.DialReadTimeout(2*time.Second), redis.DialWriteTimeout(2*time.Second))
}

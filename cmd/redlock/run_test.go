//go:build unix

package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/redistest"
)

type result struct {
	code           int
	stdout, stderr string
	elapsed        time.Duration
}

// runCLI runs the command line in-process.
func runCLI(args ...string) result {
	var out, errOut bytes.Buffer
	start := time.Now()
	code := run(args, &out, &errOut)
	return result{code: code, stdout: out.String(), stderr: errOut.String(), elapsed: time.Since(start)}
}

// startRunCLI runs the command line in a goroutine.
func startRunCLI(args ...string) <-chan result {
	done := make(chan result, 1)
	go func() { done <- runCLI(args...) }()
	return done
}

func nodesFlag(servers []*redistest.Server) string {
	return strings.Join(redistest.URLs(servers), ",")
}

// holdLock takes the lock name on servers with a client of the test's own.
func holdLock(t *testing.T, servers []*redistest.Server, name string) *redlock.Lock {
	t.Helper()
	c, err := redlock.Dial(redistest.URLs(servers))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.Lock(ctx, name)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Release(context.Background()) })
	return l
}

// freeURL returns the URL of a loopback port with nothing listening.
func freeURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return "redis://" + addr
}

// waitFile waits until path exists or done yields (the command finished early).
func waitFile(t *testing.T, path string, done <-chan result) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		select {
		case r := <-done:
			t.Fatalf("command ended before it started its work: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not created within 30s", path)
		}
	}
}

func waitResult(t *testing.T, done <-chan result) result {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(60 * time.Second):
		t.Fatal("redlock run did not return within 60s")
		return result{}
	}
}

func assertNoLockKey(t *testing.T, servers []*redistest.Server, name string) {
	t.Helper()
	for i, s := range servers {
		assert.Empty(t, s.Keys("redlock:{"+name+"}"), "lock key left on node %d", i+1)
	}
}

func TestRunPassesFenceAndReleases(t *testing.T) {
	servers := redistest.StartN(t, 3)
	r := runCLI("run", "--nodes", nodesFlag(servers), "job", "--", "sh", "-c", `echo "fence=$REDLOCK_FENCE"`)
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	m := regexp.MustCompile(`fence=(\d+)`).FindStringSubmatch(r.stdout)
	require.NotNil(t, m, "stdout: %q", r.stdout)
	first, err := strconv.ParseUint(m[1], 10, 64)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, first, uint64(1))
	assert.Empty(t, r.stderr)
	assertNoLockKey(t, servers, "job")

	// The next holder gets a larger token; the nodes come from REDLOCK_NODES.
	t.Setenv(envNodes, nodesFlag(servers))
	r = runCLI("run", "job", "--", "sh", "-c", `echo "fence=$REDLOCK_FENCE"`)
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	m = regexp.MustCompile(`fence=(\d+)`).FindStringSubmatch(r.stdout)
	require.NotNil(t, m, "stdout: %q", r.stdout)
	second, err := strconv.ParseUint(m[1], 10, 64)
	require.NoError(t, err)
	assert.Greater(t, second, first)
}

func TestRunExitStatus(t *testing.T) {
	servers := redistest.StartN(t, 3)
	nodes := nodesFlag(servers)
	r := runCLI("run", "--nodes", nodes, "job", "--", "sh", "-c", "exit 3")
	assert.Equal(t, 3, r.code, "stderr: %s", r.stderr)
	assertNoLockKey(t, servers, "job")

	r = runCLI("run", "--nodes", nodes, "job", "--", "sh", "-c", "kill -TERM $$")
	assert.Equal(t, 128+int(syscall.SIGTERM), r.code, "killed by a signal: 128+N; stderr: %s", r.stderr)

	// Flags after NAME, and COMMAND's own flags after --.
	r = runCLI("run", "job", "--nodes", nodes, "--ttl", "5s", "--", "sh", "-c", "echo $0", "--ttl")
	assert.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	assert.Equal(t, "--ttl\n", r.stdout)
}

func TestRunHeldElsewhere(t *testing.T) {
	servers := redistest.StartN(t, 3)
	nodes := nodesFlag(servers)
	holdLock(t, servers, "job")
	marker := filepath.Join(t.TempDir(), "ran")

	r := runCLI("run", "--nodes", nodes, "job", "--", "touch", marker)
	assert.Equal(t, 75, r.code)
	assert.Contains(t, r.stderr, `redlock: lock "job" not acquired in one attempt (--wait 0): held elsewhere`)
	assert.NotContains(t, r.stderr, "goroutine")
	assert.NoFileExists(t, marker, "COMMAND must not run without the lock")

	r = runCLI("run", "--nodes", nodes, "--wait", "300ms", "job", "--", "touch", marker)
	assert.Equal(t, 75, r.code)
	assert.Contains(t, r.stderr, `lock "job" not acquired within 300ms: held elsewhere`)
	assert.GreaterOrEqual(t, r.elapsed, 300*time.Millisecond, "it waited")
	assert.NoFileExists(t, marker)
}

func TestRunWaitsForRelease(t *testing.T) {
	servers := redistest.StartN(t, 3)
	l := holdLock(t, servers, "job")
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = l.Release(context.Background())
	}()
	r := runCLI("run", "--nodes", nodesFlag(servers), "--wait", "30s", "job", "--", "echo", "ran")
	assert.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	assert.Equal(t, "ran\n", r.stdout)
}

func TestRunLockLost(t *testing.T) {
	servers := redistest.StartN(t, 3)
	marker := filepath.Join(t.TempDir(), "started")
	script := `trap "echo got-term; exit 0" TERM; touch "$1"; while true; do sleep 0.05; done`
	done := startRunCLI("run", "--nodes", nodesFlag(servers), "--ttl", "1s", "--grace", "10s",
		"job", "--", "sh", "-c", script, "sh", marker)
	waitFile(t, marker, done)

	// A paused majority can no longer renew the lock: it runs out.
	servers[0].Pause()
	servers[1].Pause()
	r := waitResult(t, done)
	assert.Equal(t, 1, r.code, "lock lost and COMMAND exited 0: status 1; stderr: %s", r.stderr)
	assert.Contains(t, r.stdout, "got-term", "COMMAND got SIGTERM")
	assert.Contains(t, r.stderr, `redlock: lock "job" lost, stopping sh (SIGTERM, then SIGKILL after 10s)`)
	assert.NotContains(t, r.stderr, "goroutine")
}

func TestRunLockLostKill(t *testing.T) {
	servers := redistest.StartN(t, 3)
	marker := filepath.Join(t.TempDir(), "started")
	script := `trap "echo ignoring" TERM; touch "$1"; while true; do sleep 0.05; done`
	done := startRunCLI("run", "--nodes", nodesFlag(servers), "--ttl", "1s", "--grace", "200ms",
		"job", "--", "sh", "-c", script, "sh", marker)
	waitFile(t, marker, done)
	servers[0].Pause()
	servers[1].Pause()
	r := waitResult(t, done)
	assert.Equal(t, 128+int(syscall.SIGKILL), r.code, "stderr: %s", r.stderr)
	assert.Contains(t, r.stderr, "lost")
	assert.Contains(t, r.stderr, "sending SIGKILL")
}

func TestRunForwardsSignals(t *testing.T) {
	servers := redistest.StartN(t, 3)
	marker := filepath.Join(t.TempDir(), "started")
	script := `trap "echo got-term; exit 0" TERM; touch "$1"; while true; do sleep 0.05; done`
	done := startRunCLI("run", "--nodes", nodesFlag(servers), "job", "--", "sh", "-c", script, "sh", marker)
	waitFile(t, marker, done)
	// redlock is notified of SIGTERM from before COMMAND starts until it returns.
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	r := waitResult(t, done)
	assert.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	assert.Contains(t, r.stdout, "got-term")
	assertNoLockKey(t, servers, "job")
}

func TestRunCommandNotFound(t *testing.T) {
	servers := redistest.StartN(t, 3)
	nodes := nodesFlag(servers)
	r := runCLI("run", "--nodes", nodes, "job", "--", "no-such-command-redlock-test")
	assert.Equal(t, 127, r.code)
	assert.Contains(t, r.stderr, "redlock: no-such-command-redlock-test: command not found")

	r = runCLI("run", "--nodes", nodes, "job", "--", filepath.Join(t.TempDir(), "missing"))
	assert.Equal(t, 127, r.code)
	assert.Contains(t, r.stderr, "command not found")

	notExec := filepath.Join(t.TempDir(), "script")
	require.NoError(t, os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644))
	r = runCLI("run", "--nodes", nodes, "job", "--", notExec)
	assert.Equal(t, 126, r.code)
	assert.Contains(t, r.stderr, "permission denied")
	assertNoLockKey(t, servers, "job")
}

func TestRunUnreachable(t *testing.T) {
	down1, down2 := freeURL(t), freeURL(t)
	up := redistest.Start(t)
	r := runCLI("run", "--nodes", down1+","+up.URL()+","+down2, "job", "--", "true")
	assert.Equal(t, exitUnavailable, r.code)
	assert.Contains(t, r.stderr, `lock "job" not acquired in one attempt (--wait 0): too few nodes reachable: 2 of 3 failed`)
	assert.Contains(t, r.stderr, "connection refused")
	assert.Contains(t, r.stderr, "node "+strings.TrimPrefix(down1, "redis://")+"/0:")
	assert.NotContains(t, r.stderr, "goroutine")
}

func TestRunBadNodes(t *testing.T) {
	t.Setenv(envNodes, "")
	tests := []struct {
		nodes string
		want  string
	}{
		{"", `--nodes "": no node URLs (an unset variable?)`},
		{" ", `--nodes " ": no node URLs`},
		{"redis://127.0.0.1:7000,redis://user:s3cret@127.0.0.1:port", "--nodes: node 2 of 2: invalid URL"},
		{"redis://:s3cret@127.0.0.1:99999", `port "99999"`},
		{"127.0.0.1:6379", `"127.0.0.1:6379" is not a URL: write redis://127.0.0.1:6379`},
		{"http://127.0.0.1", "scheme must be redis:// or rediss://"},
		{"redis://a,,redis://b", "node 2 of 3 is empty"},
		{"redis://a:6379,redis://A", "node 2 of 2: a:6379/0 is the Redis instance of node 1"},
		{"redis://a/0,redis://b,redis://a/1", "node 3 of 3: a:6379/1 is the Redis instance of node 1 (a:6379/0)"},
	}
	for _, tt := range tests {
		for _, cmd := range [][]string{{"run", "--nodes", tt.nodes, "job", "--", "true"}, {"status", "--nodes", tt.nodes, "job"}} {
			r := runCLI(cmd...)
			assert.Equal(t, exitConfig, r.code, "%v", cmd)
			assert.Contains(t, r.stderr, tt.want, "%v", cmd)
			assert.NotContains(t, r.stderr, "s3cret", "%v: no password in messages", cmd)
			assert.Contains(t, r.stderr, "--help", "%v", cmd)
		}
	}
	r := runCLI("run", "job", "--", "true")
	assert.Equal(t, exitConfig, r.code)
	assert.Contains(t, r.stderr, "no nodes: give --nodes")
	t.Setenv(envNodes, "redis://u:s3cret@h:x")
	r = runCLI("run", "job", "--", "true")
	assert.Equal(t, exitConfig, r.code)
	assert.Contains(t, r.stderr, "REDLOCK_NODES: node 1 of 1: invalid URL")
	assert.NotContains(t, r.stderr, "s3cret")
	// An empty --nodes is an error, not a fall-back to REDLOCK_NODES.
	t.Setenv(envNodes, "redis://127.0.0.1:1")
	r = runCLI("run", "--nodes", "", "job", "--", "true")
	assert.Equal(t, exitConfig, r.code)
	assert.Contains(t, r.stderr, `--nodes "": no node URLs`)
}

func TestRunAndStatusUsage(t *testing.T) {
	t.Setenv(envNodes, "redis://127.0.0.1:1")
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"run"}, 2, "redlock run: missing the lock NAME"},
		{[]string{"run", "job"}, 2, "redlock run: missing COMMAND"},
		{[]string{"run", "job", "--"}, 2, "missing COMMAND"},
		{[]string{"run", "--help"}, 0, "Usage: redlock run [flags] NAME -- COMMAND [ARGS...]"},
		{[]string{"run", "-h"}, 0, "Examples:"},
		{[]string{"help", "run"}, 0, "REDLOCK_FENCE"},
		{[]string{"run", "--bogus", "job", "--", "true"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"run", "--ttl", "soon", "job", "--", "true"}, 2, `invalid value "soon" for flag -ttl: not a duration`},
		{[]string{"run", "--ttl", "5", "job", "--", "true"}, 2, `invalid value "5" for flag -ttl: a duration needs a unit: did you mean 5s?`},
		{[]string{"run", "--wait", "30", "job", "--", "true"}, 2, "did you mean 30s?"},
		{[]string{"run", "--ttl", "0s", "job", "--", "true"}, exitConfig, "--ttl 0s: must be positive"},
		{[]string{"run", "--wait", "-1s", "job", "--", "true"}, exitConfig, "--wait -1s: must not be negative"},
		{[]string{"run", "--ttl", "1500us", "job", "--", "true"}, exitConfig, "whole number of milliseconds"},
		{[]string{"run", "--ttl", "2ms", "job", "--", "true"}, exitConfig, "TTL 2ms is too short for its own drift allowance 2.02ms"},
		{[]string{"run", "--ttl", "50ms", "job", "--", "true"}, exitConfig, "--ttl 50ms: too short"},
		{[]string{"run", "--key-prefix", "a{b", "job", "--", "true"}, exitConfig, "must not contain braces"},
		{[]string{"status"}, 2, "redlock status: missing the lock NAME"},
		{[]string{"status", "job", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"status", "--help"}, 0, "Usage: redlock status [flags] NAME"},
		{[]string{"status", "--timeout", "0s", "job"}, exitConfig, "--timeout 0s: must be positive"},
		{[]string{"status", "--timeout", "2", "job"}, 2, "did you mean 2s?"},
		{[]string{"--help"}, 0, "redlock run [flags] NAME -- COMMAND"},
	}
	for _, tt := range tests {
		r := runCLI(tt.args...)
		assert.Equal(t, tt.code, r.code, "%v: %s", tt.args, r.stderr)
		assert.Contains(t, r.stdout+r.stderr, tt.want, "%v", tt.args)
		assert.NotContains(t, r.stderr, "goroutine", "no stack traces")
		if tt.code == 0 {
			assert.Empty(t, r.stderr, "%v: help goes to stdout", tt.args)
		}
	}
}

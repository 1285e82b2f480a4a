//go:build unix

package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/redistest"
)

// elect runs COMMAND while leading, with the term in its environment, and
// status shows the leader; a second candidate waits, and is elected when the
// first one's COMMAND exits (it resigns), with a higher term.
func TestElectHandsOverAndStatusShowsLeader(t *testing.T) {
	servers := redistest.StartN(t, 3)
	nodes := nodesFlag(servers)
	dir := t.TempDir()
	// COMMAND writes its term to $1.term, then waits for $1.stop.
	script := `echo "$REDLOCK_TERM" > "$1.term.tmp"; mv "$1.term.tmp" "$1.term"; while [ ! -e "$1.stop" ]; do sleep 0.02; done`
	first := startRunCLI("elect", "--nodes", nodes, "--value", "first:8080", "svc", "--", "sh", "-c", script, "sh", filepath.Join(dir, "a"))
	waitFile(t, filepath.Join(dir, "a.term"), first)
	termA := readTerm(t, filepath.Join(dir, "a.term"))
	assert.GreaterOrEqual(t, termA, uint64(1))

	r := runCLI("status", "--nodes", nodes, "svc")
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	assert.Regexp(t, regexp.MustCompile(`metadata of holder [0-9a-f]{8}: "first:8080", term `+strconv.FormatUint(termA, 10)+`, since \S+ \(\d+s ago\)`), r.stdout)

	second := startRunCLI("elect", "--nodes", nodes, "--value", "second:8080", "svc", "--", "sh", "-c", script, "sh", filepath.Join(dir, "b"))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.stop"), nil, 0o644))
	ra := waitResult(t, first)
	assert.Equal(t, 0, ra.code, "stderr: %s", ra.stderr)
	assert.Empty(t, ra.stderr)
	waitFile(t, filepath.Join(dir, "b.term"), second)
	assert.Greater(t, readTerm(t, filepath.Join(dir, "b.term")), termA)
	r = runCLI("status", "--nodes", nodes, "svc")
	assert.Contains(t, r.stdout, `"second:8080"`)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "b.stop"), nil, 0o644))
	rb := waitResult(t, second)
	assert.Equal(t, 0, rb.code, "stderr: %s", rb.stderr)
	assertNoLockKey(t, servers, "svc")
}

func readTerm(t *testing.T, path string) uint64 {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	n, err := strconv.ParseUint(string(regexp.MustCompile(`\d+`).Find(b)), 10, 64)
	require.NoError(t, err, "term %q", b)
	return n
}

// When the leadership is lost (a paused majority cannot renew it), elect
// stops COMMAND with SIGTERM, and exits 1 as COMMAND exited 0.
func TestElectStopsCommandWhenLeadershipLost(t *testing.T) {
	servers := redistest.StartN(t, 3)
	marker := filepath.Join(t.TempDir(), "started")
	script := `trap "echo got-term; exit 0" TERM; touch "$1"; while true; do sleep 0.05; done`
	done := startRunCLI("elect", "--nodes", nodesFlag(servers), "--ttl", "1s", "--grace", "10s",
		"job", "--", "sh", "-c", script, "sh", marker)
	waitFile(t, marker, done)
	servers[0].Pause()
	servers[1].Pause()
	defer servers[0].Resume()
	defer servers[1].Resume()
	r := waitResult(t, done)
	assert.Equal(t, 1, r.code, "leadership lost and COMMAND exited 0: status 1; stderr: %s", r.stderr)
	assert.Contains(t, r.stdout, "got-term", "COMMAND got SIGTERM")
	assert.Contains(t, r.stderr, `redlock: leadership of "job" lost, stopping sh (SIGTERM, then SIGKILL after 10s)`)
	assert.NotContains(t, r.stderr, "goroutine")
}

// A COMMAND that ignores SIGTERM is killed once the grace has passed after
// the leadership was lost: elect exits as COMMAND did (128+SIGKILL).
func TestElectKillsCommandAfterGrace(t *testing.T) {
	servers := redistest.StartN(t, 3)
	marker := filepath.Join(t.TempDir(), "started")
	script := `trap "echo ignoring" TERM; touch "$1"; while true; do sleep 0.05; done`
	done := startRunCLI("elect", "--nodes", nodesFlag(servers), "--ttl", "1s", "--grace", "200ms",
		"job", "--", "sh", "-c", script, "sh", marker)
	waitFile(t, marker, done)
	servers[0].Pause()
	servers[1].Pause()
	defer servers[0].Resume()
	defer servers[1].Resume()
	r := waitResult(t, done)
	assert.Equal(t, 128+int(syscall.SIGKILL), r.code, "stderr: %s", r.stderr)
	assert.Contains(t, r.stdout, "ignoring", "COMMAND got SIGTERM first")
	assert.Contains(t, r.stderr, `redlock: leadership of "job" lost, stopping sh (SIGTERM, then SIGKILL after 200ms)`)
	assert.Contains(t, r.stderr, "sending SIGKILL")
	assert.NotContains(t, r.stderr, "goroutine")
}

// --wait bounds the campaign: another leader holds on, so COMMAND does not
// run (75). Bad input is a usage or configuration error.
func TestElectWaitAndUsage(t *testing.T) {
	servers := redistest.StartN(t, 3)
	c, err := redlock.Dial(redistest.URLs(servers))
	require.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ld, err := c.Campaign(ctx, "svc", "other")
	require.NoError(t, err)
	defer ld.Resign(context.Background())

	r := runCLI("elect", "--nodes", nodesFlag(servers), "--wait", "200ms", "svc", "--", "true")
	assert.Equal(t, exitTempFail, r.code, "stderr: %s", r.stderr)
	assert.Contains(t, r.stderr, `not elected to "svc" within 200ms`)

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"elect", "--help"}, 0, "Usage: redlock elect"},
		{[]string{"elect", "--nodes", nodesFlag(servers), "svc"}, exitUsage, "missing COMMAND"},
		{[]string{"elect", "--nodes", nodesFlag(servers)}, exitUsage, "NAME"},
		{[]string{"elect", "--nodes", nodesFlag(servers), "--ttl", "10ms", "svc", "--", "true"}, exitConfig, "too short"},
		{[]string{"elect", "--nodes", "", "svc", "--", "true"}, exitConfig, ""},
		{[]string{"elect", "--nodes", nodesFlag(servers), "svc", "--", "no-such-command-redlock-test"}, exitNotFound, "command not found"},
	} {
		r := runCLI(tc.args...)
		assert.Equal(t, tc.code, r.code, "%v: %s%s", tc.args, r.stdout, r.stderr)
		assert.Contains(t, r.stdout+r.stderr, tc.want, "%v", tc.args)
		assert.NotContains(t, r.stderr, "goroutine", "%v", tc.args)
	}
}

// status prints the metadata a plain lock was taken with (WithMetadata).
func TestStatusShowsMetadata(t *testing.T) {
	servers := redistest.StartN(t, 3)
	c, err := redlock.Dial(redistest.URLs(servers))
	require.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.Lock(ctx, "job", redlock.WithMetadata("backup on host-1\npid 42"))
	require.NoError(t, err)
	defer l.Release(ctx)
	r := runCLI("status", "--nodes", nodesFlag(servers), "job")
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	assert.Contains(t, r.stdout, "metadata of holder "+redlock.Digest(l.Token())+`: "backup on host-1\npid 42", since `)
	assert.NotContains(t, r.stdout, "term", "not fenced")
}

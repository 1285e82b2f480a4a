//go:build unix

package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

// holdOn takes the lock name on exactly servers (a client of the test's own
// over them), as another host would.
func holdOn(t *testing.T, name string, servers ...*redistest.Server) {
	t.Helper()
	holdLock(t, servers, name)
}

// Every exit status of redlock run, against real redis-servers: one row per
// row of the table in docs/cli.md and redlock --help.
func TestRunExitCodes(t *testing.T) {
	t.Setenv(envNodes, "")
	t.Setenv(envPassword, "")
	t.Setenv(envPasswordFile, "")
	servers := redistest.StartN(t, 3)
	a, b, c := servers[0], servers[1], servers[2]
	auth := redistest.Start(t, "--requirepass", "s3cret-pw")
	paused := redistest.Start(t)
	paused.Pause()
	t.Cleanup(paused.Resume)
	down1, down2 := freeURL(t), freeURL(t)
	all := nodesFlag(servers)

	holdOn(t, "held", a, b, c) // held by another owner on every node
	holdOn(t, "held2", a, b)   // on two nodes: with a third node down, still held
	holdOn(t, "held1", a)      // on one node: with another down, the failure decides
	alias := strings.Replace(a.Addr(), "127.0.0.1", "localhost", 1)
	notExec := filepath.Join(t.TempDir(), "script")
	require.NoError(t, os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644))

	tests := []struct {
		name   string
		args   []string // after "run"; the marker command is appended when cmd is nil
		cmd    []string
		code   int
		stderr string
	}{
		{"COMMAND's status", []string{"--nodes", all, "job"}, []string{"sh", "-c", "exit 3"}, 3, ""},
		{"COMMAND succeeded", []string{"--nodes", all, "job"}, []string{"true"}, 0, ""},
		{"usage: unknown flag", []string{"--bogus", "job"}, nil, exitUsage, "flag provided but not defined: -bogus"},
		{"usage: duration without unit", []string{"--nodes", all, "--ttl", "5", "job"}, nil, exitUsage, "did you mean 5s?"},
		{"usage: no COMMAND", []string{"--nodes", all, "job", "--"}, []string{}, exitUsage, "missing COMMAND"},

		{"unavailable: nodes unreachable", []string{"--nodes", down1 + "," + a.URL() + "," + down2, "job"}, nil, exitUnavailable,
			"too few nodes reachable: 2 of 3 failed"},
		{"unavailable: nodes quarantined (just started, --restart-quarantine 1m)", []string{"--nodes", all, "--restart-quarantine", "1m", "job"}, nil, exitUnavailable,
			"quarantined"},
		{"unavailable: wrong password", []string{"--nodes", "redis://:wrong-pw@" + auth.Addr(), "job"}, nil, exitUnavailable, "WRONGPASS"},
		{"unavailable: no password (NOAUTH)", []string{"--nodes", auth.URL(), "job"}, nil, exitUnavailable, "NOAUTH"},
		{"unavailable: node paused (timeout)", []string{"--nodes", paused.URL(), "--node-timeout", "200ms", "job"}, nil, exitUnavailable,
			"no answer within 200ms"},
		{"unavailable: refused on 1, failed on 1 of 3", []string{"--nodes", a.URL() + "," + b.URL() + "," + down1, "held1"}, nil, exitUnavailable,
			"1 refused (held elsewhere on too few nodes to deny a majority by themselves)"},
		{"unavailable: --wait, the last attempt decides", []string{"--nodes", down1 + "," + down2 + "," + a.URL(), "--wait", "300ms", "job"}, nil,
			exitUnavailable, "not acquired within 300ms: too few nodes reachable"},

		{"held elsewhere", []string{"--nodes", all, "held"}, nil, exitTempFail, "in one attempt (--wait 0): held elsewhere ("},
		{"held elsewhere, one node down", []string{"--nodes", a.URL() + "," + b.URL() + "," + down1, "held2"}, nil, exitTempFail,
			"held elsewhere (2 of 3 nodes refused"}, // the down node's failure is named only when it came before the round ended (two refusals end it)
		{"held elsewhere, --wait", []string{"--nodes", all, "--wait", "300ms", "held"}, nil, exitTempFail, "not acquired within 300ms: held elsewhere"},

		{"config: bad URL", []string{"--nodes", "redis://127.0.0.1:port", "job"}, nil, exitConfig, "--nodes: node 1 of 1: invalid URL"},
		{"config: empty --nodes", []string{"--nodes", "", "job"}, nil, exitConfig, `--nodes "": no node URLs`},
		{"config: TLS file", []string{"--nodes", "rediss://" + a.Addr(), "--tls-ca", "/nonexistent/ca.pem", "job"}, nil, exitConfig,
			"--tls-ca: open /nonexistent/ca.pem"},
		{"config: password file", []string{"--nodes", all, "--password-file", "/nonexistent/pw", "job"}, nil, exitConfig,
			"--password-file: open /nonexistent/pw"},
		{"config: option out of range", []string{"--nodes", all, "--wait", "-1s", "job"}, nil, exitConfig, "--wait -1s: must not be negative"},
		{"config: TTL within the drift allowance", []string{"--nodes", all, "--ttl", "2ms", "job"}, nil, exitConfig,
			"TTL 2ms is too short for its own drift allowance 2.02ms"},
		{"config: TTL too short to renew", []string{"--nodes", all, "--ttl", "20ms", "job"}, nil, exitConfig, "--ttl 20ms: too short"},
		{"config: one server named twice", []string{"--nodes", a.URL() + ",redis://" + alias, "job"}, nil, exitConfig, "same Redis instance"},

		{"COMMAND not executable", []string{"--nodes", all, "job"}, []string{notExec}, exitCannotStart, "permission denied"},
		{"COMMAND not found", []string{"--nodes", all, "job"}, []string{"no-such-command-redlock-test"}, exitNotFound, "command not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			marker := filepath.Join(t.TempDir(), "ran")
			cmd := tt.cmd
			if cmd == nil {
				cmd = []string{"touch", marker}
			}
			args := append(append([]string{"run"}, tt.args...), "--")
			if len(tt.args) > 0 && tt.args[len(tt.args)-1] == "--" {
				args = args[:len(args)-1]
			}
			r := runCLI(append(args, cmd...)...)
			assert.Equal(t, tt.code, r.code, "stderr: %s", r.stderr)
			if tt.stderr != "" {
				assert.Contains(t, r.stderr, tt.stderr)
			}
			assert.NoFileExists(t, marker, "COMMAND must not run")
			assert.NotContains(t, r.stderr, "goroutine")
			assert.NotContains(t, r.stderr, "s3cret")
			assert.NotContains(t, r.stderr, "wrong-pw")
		})
	}
}

// The exit status of a lock not acquired: 75 only when the refusals alone
// leave no majority, 69 when failures made it impossible, alone or with
// fewer refusals, 78 when a node is another's instance.
func TestNotAcquiredStatus(t *testing.T) {
	same := []*redlock.NodeError{{Node: "b", Err: node.ErrSameInstance}}
	down := []*redlock.NodeError{{Node: "b", Err: errors.New("connection refused")}}
	tests := []struct {
		name       string
		n, refused int
		errs       []*redlock.NodeError
		want       int
	}{
		{"3 nodes, 2 refused", 3, 2, nil, exitTempFail},
		{"3 nodes, 2 refused, 1 failed", 3, 2, down, exitTempFail},
		{"3 nodes, 1 refused, 1 failed", 3, 1, down, exitUnavailable},
		{"3 nodes, 2 failed", 3, 0, down, exitUnavailable},
		{"5 nodes, 3 refused", 5, 3, nil, exitTempFail},
		{"5 nodes, 2 refused, 2 failed", 5, 2, down, exitUnavailable},
		{"1 node, refused", 1, 1, nil, exitTempFail},
		{"1 node, failed", 1, 0, down, exitUnavailable},
		{"same instance", 2, 0, same, exitConfig},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, notAcquiredStatus(tt.n, tt.n/2+1, tt.refused, tt.errs), tt.name)
	}
}

// The last attempt decides with all its answers: those that come after the
// outcome was decided (or after --wait ended in the middle of the attempt)
// are waited for when they could make the status 75.
func TestNotAcquiredWaitsForTheLastAnswers(t *testing.T) {
	ns, err := parseNodes("redis://a,redis://b,redis://c", true)
	require.NoError(t, err)
	refuse := redlock.NodeReplyEvent{Op: "acquire"}
	fail := redlock.NodeReplyEvent{Op: "acquire", Err: errors.New("connect: connection refused")}
	tests := []struct {
		name    string
		qe      redlock.QuorumError // as the library decided it
		replies map[string]redlock.NodeReplyEvent
		code    int
		reason  string
	}{
		{"a failure decided first, the second refusal came after", redlock.QuorumError{Refused: 1, Failed: 1},
			map[string]redlock.NodeReplyEvent{"a:6379/0": refuse, "b:6379/0": fail, "c:6379/0": refuse},
			exitTempFail, "held elsewhere (2 of 3 nodes refused, and 1 failed)"},
		{"the wait ended mid-attempt: every node refused", redlock.QuorumError{Cause: context.DeadlineExceeded},
			map[string]redlock.NodeReplyEvent{"a:6379/0": refuse, "b:6379/0": refuse, "c:6379/0": refuse},
			exitTempFail, "held elsewhere (3 of 3 nodes refused)"},
		{"the third node never answers", redlock.QuorumError{Refused: 1, Failed: 1},
			map[string]redlock.NodeReplyEvent{"a:6379/0": refuse, "b:6379/0": fail},
			exitUnavailable, "node c:6379/0: no answer within 50ms"},
		{"nothing to wait for: two refusals decided", redlock.QuorumError{Refused: 2},
			nil, exitTempFail, "held elsewhere (2 of 3 nodes refused)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &runner{ns: ns, o: runOptions{wait: time.Second, nodeTimeout: 50 * time.Millisecond}, answers: newAnswers(ns.names)}
			r.answers.attempted(redlock.AttemptEvent{})
			for name, e := range tt.replies {
				e.Node = name
				r.answers.replied(e)
			}
			qe := tt.qe
			qe.Op, qe.Kind, qe.Nodes, qe.Need = "acquire", redlock.ErrNotAcquired, 3, 2
			code, reason := r.notAcquired(&qe)
			assert.Equal(t, tt.code, code, reason)
			assert.Contains(t, reason, tt.reason)
		})
	}
}

// 128+N: a signal while redlock waits for the lock ends the wait; COMMAND
// does not run.
func TestRunSignalWhileWaiting(t *testing.T) {
	servers := redistest.StartN(t, 3)
	holdLock(t, servers, "job")
	marker := filepath.Join(t.TempDir(), "ran")
	done := startRunCLI("run", "--nodes", nodesFlag(servers), "--wait", "60s", "job", "--", "touch", marker)
	// Refused, the waiter queues on the nodes for the holder's release: it is
	// waiting then, with its signal handler in place.
	queue, _ := node.QueueKeys(redlock.LockKey(redlock.DefaultKeyPrefix, "job"))
	require.Eventually(t, func() bool { return len(servers[0].Keys(queue)) == 1 }, 30*time.Second, 5*time.Millisecond,
		"redlock run did not start waiting")
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	r := waitResult(t, done)
	assert.Equal(t, 128+int(syscall.SIGTERM), r.code, "stderr: %s", r.stderr)
	assert.Contains(t, r.stderr, `waiting for lock "job" interrupted by signal: terminated`)
	assert.NoFileExists(t, marker)
}

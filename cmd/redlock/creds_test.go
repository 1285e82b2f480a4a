//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/redistest"
)

const envDump = `env | grep '^REDLOCK_' | sort`

// A password-protected node, reached with the password in the URL, a file, or
// the environment; COMMAND sees none of them.
func TestRunPasswords(t *testing.T) {
	s := redistest.Start(t, "--requirepass", "s3cret-pw")
	plain := s.URL()
	withPW := "redis://:s3cret-pw@" + s.Addr()
	file := filepath.Join(t.TempDir(), "pw")
	require.NoError(t, os.WriteFile(file, []byte("s3cret-pw\n"), 0o600))
	for _, envVar := range []string{envNodes, envPassword, envPasswordFile, envUser} {
		t.Setenv(envVar, "")
	}

	t.Run("url in REDLOCK_NODES", func(t *testing.T) {
		t.Setenv(envNodes, withPW)
		r := runCLI("run", "job", "--", "sh", "-c", envDump)
		require.Equal(t, 0, r.code, r.stderr)
		assert.NotContains(t, r.stdout, "s3cret")
		assert.Contains(t, r.stdout, "REDLOCK_NODES=redis://"+s.Addr()+"/0\n", "nodes without their passwords")
		assert.Contains(t, r.stdout, "REDLOCK_FENCE=")
	})
	t.Run("--password-file", func(t *testing.T) {
		r := runCLI("run", "--nodes", plain, "--password-file", file, "job", "--", "sh", "-c", envDump)
		require.Equal(t, 0, r.code, r.stderr)
		assert.NotContains(t, r.stdout, "s3cret")
		r = runCLI("status", "--nodes", plain, "--password-file", file, "job")
		require.Equal(t, 0, r.code, r.stderr)
		assert.Contains(t, r.stdout, "free")
	})
	t.Run("REDLOCK_PASSWORD_FILE", func(t *testing.T) {
		t.Setenv(envPasswordFile, file)
		r := runCLI("run", "--nodes", plain, "job", "--", "sh", "-c", envDump)
		require.Equal(t, 0, r.code, r.stderr)
		assert.NotContains(t, r.stdout, "REDLOCK_PASSWORD_FILE")
	})
	t.Run("REDLOCK_PASSWORD", func(t *testing.T) {
		t.Setenv(envPassword, "s3cret-pw")
		r := runCLI("run", "--nodes", plain, "job", "--", "sh", "-c", envDump)
		require.Equal(t, 0, r.code, r.stderr)
		assert.NotContains(t, r.stdout, "s3cret")
		assert.NotContains(t, r.stdout, "REDLOCK_PASSWORD")
	})
	t.Run("ACL user, password with URL delimiters", func(t *testing.T) {
		const pw = "p@ss #w/rd%:?"
		s := redistest.Start(t) // without requirepass, for the test's own connection
		plain := s.URL()
		_, err := s.Do("ACL", "SETUSER", "odd", "on", ">"+pw, "~*", "&*", "+@all")
		require.NoError(t, err)
		f := filepath.Join(t.TempDir(), "pw")
		require.NoError(t, os.WriteFile(f, []byte(pw+"\n"), 0o600))
		r := runCLI("run", "--nodes", plain, "--user", "odd", "--password-file", f, "job", "--", "true")
		require.Equal(t, 0, r.code, r.stderr)
		t.Setenv(envUser, "odd")
		t.Setenv(envPassword, pw)
		r = runCLI("status", "--nodes", plain, "job")
		require.Equal(t, 0, r.code, r.stderr)
	})
	t.Run("wrong password", func(t *testing.T) {
		t.Setenv(envPassword, "wrong-s3cret")
		r := runCLI("run", "--nodes", plain, "job", "--", "true")
		assert.Equal(t, exitUnavailable, r.code, "a node refusing the password is a failed node, not a lock held elsewhere")
		assert.Contains(t, r.stderr, "WRONGPASS")
		assert.NotContains(t, r.stderr, "wrong-s3cret")
		r = runCLI("status", "--nodes", plain, "job")
		assert.Equal(t, 1, r.code)
		assert.NotContains(t, r.stdout+r.stderr, "wrong-s3cret")
	})
	t.Run("bad files", func(t *testing.T) {
		empty := filepath.Join(t.TempDir(), "empty")
		require.NoError(t, os.WriteFile(empty, nil, 0o600))
		two := filepath.Join(t.TempDir(), "two")
		require.NoError(t, os.WriteFile(two, []byte("s3cret\nmore\n"), 0o600))
		for _, tt := range []struct {
			args []string
			want string
		}{
			{[]string{"--password-file", "/nonexistent"}, "--password-file: open /nonexistent"},
			{[]string{"--password-file", empty}, "empty file"},
			{[]string{"--password-file", two}, "more than one line"},
			{[]string{"--user", "bob"}, "--user bob: no password"},
			{[]string{"--tls-ca", file}, "node 1 (redis://" + s.Addr() + "/0) is redis://"},
		} {
			r := runCLI(append(append([]string{"run", "--nodes", plain}, tt.args...), "job", "--", "true")...)
			assert.Equal(t, exitConfig, r.code, "%v", tt.args)
			assert.Contains(t, r.stderr, tt.want, "%v", tt.args)
			assert.NotContains(t, r.stderr, "s3cret")
		}
	})
}

func TestChildEnv(t *testing.T) {
	env := childEnv([]string{
		"PATH=/bin", "REDLOCK_PASSWORD=pw1", "REDLOCK_PASSWORD_FILE=/run/pw",
		"REDLOCK_NODES=redis://u:pw2@a:1/2, rediss://:pw3@b,redis://x:pw4@bad:port",
		"REDLOCK_PASSWORDX=kept",
	})
	assert.Equal(t, []string{
		"PATH=/bin",
		"REDLOCK_NODES=redis://a:1/2,rediss://b:6379/0,redis://xxxxx@bad:port",
		"REDLOCK_PASSWORDX=kept",
	}, env)
}

func TestDashBeforeNameAndVersion(t *testing.T) {
	t.Setenv(envNodes, "redis://127.0.0.1:1")
	r := runCLI("run", "--", "sleep", "10")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, `"--" given before NAME`)
	r = runCLI("run", "--", "-odd", "--", "true")
	assert.Equal(t, exitUnavailable, r.code, "-- NAME -- COMMAND: the lock -odd, not a usage error: %s", r.stderr)
	assert.Contains(t, r.stderr, `lock "-odd" not acquired`)
	r = runCLI("status", "--", "-odd")
	assert.Equal(t, 1, r.code, r.stderr)
	for _, v := range []string{"--version", "version", "-version"} {
		r = runCLI(v)
		assert.Equal(t, 0, r.code)
		assert.True(t, strings.HasPrefix(r.stdout, "redlock "), r.stdout)
		assert.Contains(t, r.stdout, "go1.")
	}
}

func TestRunAndStatusTLS(t *testing.T) {
	s := redistest.StartTLS(t)
	f := s.Files
	for _, v := range []string{envNodes, envTLSCA, envTLSCert, envTLSKey, envTLSSkip} {
		t.Setenv(v, "")
	}
	// A TLS handshake under -race on a busy machine can outlast the default
	// 500 ms node timeout (a CI run: "no answer within 500ms" instead of the
	// certificate error): every run here gets 5 s.
	const tlsTimeout = "5s"
	tlsFlags := []string{"--nodes", s.TLSURL(), "--tls-ca", f.CA, "--tls-cert", f.ClientCert, "--tls-key", f.ClientKey}
	r := runCLI(append(append([]string{"run", "--node-timeout", tlsTimeout}, tlsFlags...), "job", "--", "true")...)
	require.Equal(t, 0, r.code, r.stderr)
	r = runCLI(append(append([]string{"status"}, tlsFlags...), "job")...)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "fencing counter: 1")

	t.Setenv(envNodes, s.TLSURL())
	t.Setenv(envTLSCert, f.ClientCert)
	t.Setenv(envTLSKey, f.ClientKey)
	r = runCLI("run", "--node-timeout", tlsTimeout, "job", "--", "true")
	assert.Equal(t, exitUnavailable, r.code, "no CA: the system's roots do not know the test CA")
	assert.Contains(t, r.stderr, "certificate signed by unknown authority")
	r = runCLI("run", "--node-timeout", tlsTimeout, "--tls-skip-verify", "job", "--", "true")
	assert.Equal(t, 0, r.code, r.stderr)
	t.Setenv(envTLSSkip, "true")
	r = runCLI("run", "--node-timeout", tlsTimeout, "job", "--", "true")
	assert.Equal(t, 0, r.code, r.stderr)
	r = runCLI("run", "--node-timeout", tlsTimeout, "--tls-skip-verify=false", "job", "--", "true")
	assert.Equal(t, exitUnavailable, r.code, "the flag wins over the environment")
	t.Setenv(envTLSSkip, "")
	t.Setenv(envTLSCA, f.CA)
	r = runCLI("status", "job")
	assert.Equal(t, 0, r.code, r.stderr)

	t.Setenv(envTLSKey, "")
	r = runCLI("run", "--node-timeout", tlsTimeout, "job", "--", "true")
	assert.Equal(t, exitConfig, r.code)
	assert.Contains(t, r.stderr, "--tls-cert and --tls-key go together")
	t.Setenv(envTLSKey, f.ClientKey)
	t.Setenv(envTLSCA, f.ClientKey)
	r = runCLI("run", "--node-timeout", tlsTimeout, "job", "--", "true")
	assert.Equal(t, exitConfig, r.code)
	assert.Contains(t, r.stderr, "no PEM certificate")
}

// Two addresses of one redis-server (127.0.0.1 and localhost) pass the URL
// check but are one vote: status marks the second, run cannot make a majority.
func TestSameInstanceTwoAddresses(t *testing.T) {
	s := redistest.Start(t)
	alias := strings.Replace(s.Addr(), "127.0.0.1", "localhost", 1)
	nodes := s.URL() + ",redis://" + alias
	r := runCLI("status", "--nodes", nodes, "job")
	assert.Equal(t, 1, r.code, "one of two nodes answered: no majority\n%s", r.stdout)
	assert.Contains(t, r.stdout, "localhost:")
	assert.Contains(t, r.stdout, "is the same Redis instance as node "+s.Addr()+"/0")
	r = runCLI("run", "--nodes", nodes, "job", "--", "true")
	assert.Equal(t, exitConfig, r.code, "one server named twice: a bad node list")
	assert.Contains(t, r.stderr, "same Redis instance")
}

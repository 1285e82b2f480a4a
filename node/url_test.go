package node_test

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/node"
)

func TestParse(t *testing.T) {
	tests := []struct {
		raw  string
		want node.URL
	}{
		{"redis://localhost", node.URL{Scheme: "redis", Host: "localhost", Port: 6379}},
		{"redis://LocalHost:7000/3", node.URL{Scheme: "redis", Host: "localhost", Port: 7000, DB: 3}},
		{"redis://h:6379/", node.URL{Scheme: "redis", Host: "h", Port: 6379}},
		{"rediss://user:pw@example.com:6380/1", node.URL{Scheme: "rediss", Username: "user", Password: "pw", Host: "example.com", Port: 6380, DB: 1}},
		{"redis://:pw@h", node.URL{Scheme: "redis", Password: "pw", Host: "h", Port: 6379}},
		{"redis://pw@h", node.URL{Scheme: "redis", Password: "pw", Host: "h", Port: 6379}}, // redis-cli: a lone user info is the password
		{"redis://@h", node.URL{Scheme: "redis", Host: "h", Port: 6379}},
		{"redis://u:p%23ss%40w%2Fd%3A@h", node.URL{Scheme: "redis", Username: "u", Password: "p#ss@w/d:", Host: "h", Port: 6379}},
		{"redis://u:a:b@h", node.URL{Scheme: "redis", Username: "u", Password: "a:b", Host: "h", Port: 6379}},
		{"redis://[::1]:6379", node.URL{Scheme: "redis", Host: "::1", Port: 6379}},
		{"REDISS://H", node.URL{Scheme: "rediss", Host: "h", Port: 6379}},
		{"redis://[::ffff:127.0.0.1]", node.URL{Scheme: "redis", Host: "127.0.0.1", Port: 6379}},
		{"redis://[0:0:0:0:0:0:0:1]", node.URL{Scheme: "redis", Host: "::1", Port: 6379}},
		{"redis://my_host.example-1.com:65535/15", node.URL{Scheme: "redis", Host: "my_host.example-1.com", Port: 65535, DB: 15}},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			u, err := node.Parse(tt.raw)
			require.NoError(t, err)
			assert.Equal(t, tt.want, *u)
			back, err := node.Parse(u.Redacted())
			require.NoError(t, err)
			assert.Equal(t, u.Name(), back.Name())
			for _, shown := range []string{u.String(), fmt.Sprintf("%v %+v %#v %s", u, u, u, *u), fmt.Sprint(*u)} {
				assert.NotContains(t, shown, "pw")
			}
		})
	}
}

func TestParseRefuses(t *testing.T) {
	tests := []struct{ raw, reason string }{
		{"http://localhost", "scheme must be"},
		{"localhost:6379", "not a URL"},
		{"redis://", "missing host"},
		{"redis://:6379", "missing host"},
		{"redis://h:0", `port "0": must be 1 to 65535`},
		{"redis://h:", `port "": empty`},
		{"redis://h:/0", `port "": empty`},
		{"redis://h:65536", "at most 65535"},
		{"redis://h:07811", "no leading zeros"},
		{"redis://h:+1", "not a decimal"},
		{"redis://h:abc", "not a decimal"},
		{"redis://h/-1", "not a decimal"},
		{"redis://h/01", "no leading zeros"},
		{"redis://h:6379/1/", "no trailing /"},
		{"redis://h/1/x", "no trailing /"},
		{"redis://h/99999999999", "at most"},
		{"redis://h/?db=2", "query options"},
		{"redis://h?tls=true", "query options"},
		{"redis://h#x", "fragment"},
		{"redis://h h", "only letters"},
		{"redis://[::1", "missing ]"},
		{"redis://[1.2.3.4]", "not an IPv6"},
		{"redis://[fe80::1%25eth0]", "not an IPv6"},
		{"redis://[::1]x", "expected :port"},
		{"redis://::1", "missing host"},
		{"redis://user:@h", "needs a password"},
		{"redis://u:50%@h", "write % as %25"},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			_, err := node.Parse(tt.raw)
			require.ErrorIs(t, err, node.ErrInvalidURL)
			var ue *node.URLError
			require.ErrorAs(t, err, &ue)
			assert.Contains(t, ue.Reason, tt.reason)
			_, err = node.ParseURL(tt.raw)
			assert.ErrorIs(t, err, node.ErrInvalidURL)
		})
	}
}

// The URLs of the issue that leaked passwords into errors, and more.
func TestParseNeverShowsUserinfo(t *testing.T) {
	for raw, secrets := range map[string][]string{
		"redis://user:pass#word@h":              {"pass#word", "pass", "#word"},
		"redis://user:99/topsecret@h":           {"topsecret", "99/"},
		"redis://@:00#0@0:0/0":                  {"00#0", "@:0"},
		"redis://topsecret:hunter2@h:abc":       {"topsecret", "hunter2"},
		"redis://topsecret:hunter2@h/x":         {"topsecret", "hunter2"},
		"redis://topsecret:hunter2@h:6379/1/":   {"topsecret", "hunter2"},
		"redis://topsecret:hunter2@h?db=1":      {"topsecret", "hunter2"},
		"redis://topsecret:hunter2@":            {"topsecret", "hunter2"},
		"http://topsecret:hunter2@h":            {"topsecret", "hunter2"},
		"topsecret:hunter2@h:6379":              {"topsecret", "hunter2"},
		"redis://topsecret:hun ter2@h":          {"topsecret", "hun ter2"},
		"redis://topsecret:hun%zzter2@h":        {"topsecret", "zzter2"},
		"redis://topsecret:@h":                  {"topsecret"},
		"redis://topsecret:hunter2@[::1":        {"topsecret", "hunter2"},
		"redis://topsecret:hunter2@h:1/" + "x@": {"topsecret", "hunter2"},
	} {
		t.Run(raw, func(t *testing.T) {
			_, err := node.Parse(raw)
			require.ErrorIs(t, err, node.ErrInvalidURL)
			for _, secret := range secrets {
				assert.NotContains(t, err.Error(), secret)
			}
			assert.Contains(t, err.Error(), "xxxxx@")
		})
	}
}

func TestDialRefuses(t *testing.T) {
	_, err := node.Dial("redis://h:6379/1/")
	assert.ErrorIs(t, err, node.ErrInvalidURL, "not silently db 0")
	_, err = node.Dial("redis://h", node.WithTLSConfig(&tls.Config{}))
	assert.ErrorIs(t, err, node.ErrInvalidOption)
	assert.Contains(t, err.Error(), "rediss://")
	n, err := node.Dial("rediss://h", node.WithTLSConfig(&tls.Config{}))
	require.NoError(t, err)
	assert.Equal(t, "h:6379/0", n.Name())
	require.NoError(t, n.Close())
}

func TestCheckDistinct(t *testing.T) {
	require.NoError(t, node.CheckDistinct([]string{"redis://a", "redis://b", "redis://a:6380"}))
	for _, urls := range [][]string{
		{"redis://a:6379/0", "redis://b", "redis://A/1"},
		{"redis://a", "rediss://u:p@a:6379"},
		{"redis://[::1]", "redis://[0::1]:6379/2"},
	} {
		err := node.CheckDistinct(urls)
		require.ErrorIs(t, err, node.ErrInvalidURL, urls)
		assert.Contains(t, err.Error(), "same Redis instance")
	}
	err := node.CheckDistinct([]string{"redis://a", "redis://u:secret@b:x"})
	require.ErrorIs(t, err, node.ErrInvalidURL)
	assert.NotContains(t, err.Error(), "secret")
}

// FuzzParseURL: Parse never panics; its errors never show the user info; a
// parsed URL's Redacted form parses back to the same node. The seeds in
// testdata/fuzz/FuzzParseURL run with every go test.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{
		"redis://localhost", "rediss://u:p@h:6380/2", "redis://[::1]:1/0", "redis://user:pass#word@h",
		"redis://@:00#0@0:0/0", "redis://h:/0", "redis://h:07811", "redis://u:99/topsecret@h",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := node.Parse(raw)
		if err != nil {
			var ue *node.URLError
			if !errors.As(err, &ue) || !errors.Is(err, node.ErrInvalidURL) {
				t.Fatalf("error %v is not a *URLError", err)
			}
			checkNoSecret(t, raw, err.Error())
			return
		}
		if u.Port < 1 || u.Port > 65535 || u.DB < 0 || u.Host == "" {
			t.Fatalf("%q parsed to out-of-range %+v", raw, *u)
		}
		back, err := node.Parse(u.Redacted())
		if err != nil {
			t.Fatalf("Redacted %q of %q does not parse: %v", u.Redacted(), raw, err)
		}
		if back.Name() != u.Name() || back.Scheme != u.Scheme || back.Password != "" || back.Username != "" {
			t.Fatalf("Redacted %q of %q parses to %+v", u.Redacted(), raw, *back)
		}
		for _, s := range []string{u.Redacted(), u.String(), u.Name(), u.Addr()} {
			if u.Password != "" && len(u.Password) >= 4 && strings.Contains(s, u.Password) && !strings.Contains(u.Host, u.Password) {
				t.Fatalf("%q shows the password of %q", s, raw)
			}
		}
	})
}

// checkNoSecret fails when msg, the error of raw, depends on the characters of
// raw's user info (between :// and the last @) and not only on their kinds: the
// error of the same URL with another user info of the same shape must be the
// same, so the message cannot show any of it.
func checkNoSecret(t *testing.T, raw, msg string) {
	t.Helper()
	at := strings.LastIndex(raw, "@")
	if at < 0 {
		return
	}
	start := 0
	if i := strings.Index(raw, "://"); i >= 0 && i < at {
		start = i + 3
	}
	other := raw[:start] + strings.Map(sameKind, raw[start:at]) + raw[at:]
	_, err := node.Parse(other)
	if err == nil || err.Error() != msg {
		t.Fatalf("error of %q depends on its user info: %q, but %v for %q", raw, msg, err, other)
	}
}

// sameKind maps a character to another of the same kind: a hex digit to a hex
// digit, another letter to another letter; the rest (punctuation, bytes >=
// 0x80) stays.
func sameKind(r rune) rune {
	rot := func(r rune, set string) rune {
		i := strings.IndexRune(set, r)
		return rune(set[(i+1)%len(set)])
	}
	for _, set := range []string{"0123456789abcdefABCDEF", "ghijklmnopqrstuvwxyzGHIJKLMNOPQRSTUVWXYZ"} {
		if strings.ContainsRune(set, r) {
			return rot(r, set)
		}
	}
	return r
}

package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDemo(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"demo", "--nodes", "5"}, &out, &errOut)
	require.Equal(t, 0, code, "stderr: %s", errOut.String())
	s := out.String()
	for _, want := range []string{
		"5 embedded Redis nodes, majority 3",
		"2 of 5 nodes killed: a majority is still up",
		"no majority left",
		"refused:",
		"Extend: lock lost",
		"4. the fenced resource refuses the paused holder's stale write",
		"writes balance=150 with token",
		"writes balance=90 with token",
		": refused (fence: stale token",
		`holds "balance=150 (by B)"`,
	} {
		assert.Contains(t, s, want)
	}
	assert.Equal(t, strings.Count(s, "acquired, valid"), strings.Count(s, "released")-1,
		"every contended acquisition is released (plus B's release)")
}

func TestUsage(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "Usage:"},
		{[]string{"--help"}, 0, "redlock demo"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"demo", "--nodes", "0"}, 2, "must be between 1 and 9"},
		{[]string{"demo", "--bogus"}, 2, "flag provided but not defined"},
		{[]string{"demo", "--help"}, 0, "Usage: redlock demo"},
	}
	for _, tt := range tests {
		var out, errOut bytes.Buffer
		code := run(tt.args, &out, &errOut)
		assert.Equal(t, tt.code, code, "%v", tt.args)
		assert.Contains(t, out.String()+errOut.String(), tt.want, "%v", tt.args)
		assert.NotContains(t, errOut.String(), "goroutine", "no stack traces")
	}
}

func TestDemoSingleNode(t *testing.T) {
	var out, errOut bytes.Buffer
	require.Equal(t, 0, run([]string{"demo", "--nodes", "1"}, &out, &errOut), errOut.String())
	assert.Contains(t, out.String(), "1 embedded Redis nodes, majority 1")
}

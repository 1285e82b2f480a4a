package node_test

import (
	"crypto/sha1"
	"encoding/hex"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/node"
)

// A record is read back as written (values with newlines included); a
// malformed one is ErrUnexpectedReply, never a panic; a stored record counts
// only for the token it was written for.
func TestParseMeta(t *testing.T) {
	m, err := node.ParseMeta("7\n3\n1733234400123\nhost-a\nline 2")
	require.NoError(t, err)
	assert.Equal(t, node.Meta{Term: 7, Rev: 3, Since: time.UnixMilli(1733234400123), Value: "host-a\nline 2"}, m)
	m, err = node.ParseMeta("0\n0\n0\n")
	require.NoError(t, err)
	assert.Empty(t, m.Value)
	for _, bad := range []string{"", "7", "7\n3", "7\n3\n12", "x\n3\n12\nv", "7\n-1\n12\nv", "7\n3\nnow\nv", "18446744073709551616\n0\n0\nv"} {
		_, err := node.ParseMeta(bad)
		assert.ErrorIs(t, err, node.ErrUnexpectedReply, "%q", bad)
	}

	sum := sha1.Sum([]byte("tok"))
	stored := hex.EncodeToString(sum[:]) + "5\n0\n1733234400123\nv"
	m, ok, err := node.ParseStoredMeta(stored, "tok")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, uint64(5), m.Term)
	for _, tc := range []struct{ stored, token string }{
		{stored, "other"}, {stored, ""}, {"short", "tok"}, {"", "tok"},
	} {
		_, ok, err := node.ParseStoredMeta(tc.stored, tc.token)
		assert.NoError(t, err)
		assert.False(t, ok, "%q for %q", tc.stored, tc.token)
	}
	_, ok, err = node.ParseStoredMeta(hex.EncodeToString(sum[:])+"garbage", "tok")
	assert.ErrorIs(t, err, node.ErrUnexpectedReply)
	assert.False(t, ok)
	assert.Equal(t, "redlock:{x}:meta", node.MetaKey("redlock:{x}"))
}

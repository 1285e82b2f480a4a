package redlock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

// Two URLs that reach one redis-server through different addresses (127.0.0.1
// and localhost) pass the URL check, but not the run_id check on first contact:
// one of them fails every call, so the instance is one vote, not two.
func TestDialSameInstanceByRunID(t *testing.T) {
	s := redistest.Start(t)
	alias := "redis://" + strings.Replace(s.Addr(), "127.0.0.1", "localhost", 1)
	c, err := redlock.Dial([]string{s.URL(), alias}, redlock.WithTTL(time.Second))
	require.NoError(t, err)
	defer c.Close()

	_, err = c.TryLock(ctxT(t, 5*time.Second), "job")
	require.Error(t, err, "one instance cannot be a majority of two")
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	require.Len(t, qe.Errs, 1)
	var se *node.SameInstanceError
	require.True(t, errors.As(qe.Errs[0].Err, &se), "%v", qe.Errs[0].Err)
	assert.ElementsMatch(t, []string{s.Addr() + "/0", strings.TrimPrefix(alias, "redis://") + "/0"}, []string{se.Node, se.Other})
	assert.Contains(t, err.Error(), "same Redis instance")
}

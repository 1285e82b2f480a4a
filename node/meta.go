package node

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The holder's metadata (issue 27): a leader's term, value and since-when,
// or a plain lock's WithMetadata, stored beside the lock key and read back
// only while the lock key holds the token it was written for.

// MetaSuffix ends the metadata key of a lock key: MetaKey(key) is key +
// MetaSuffix, in the lock key's hash slot.
const MetaSuffix = ":meta"

// MetaKey returns the key of the holder's metadata beside lock key key. Its
// changes are published on the channel of the same name (Watch it).
func MetaKey(key string) string { return key + MetaSuffix }

// Meta is a lock holder's metadata.
type Meta struct {
	// Term is the holder's fencing token when it has one (a leader's term),
	// and 0 otherwise.
	Term uint64
	// Rev orders the records of one holder: 0 when the lock was taken, one
	// more for each later write (a leader's Proclaim). Of two records of one
	// term, the one with the larger Rev is the newer.
	Rev uint64
	// Since is when the holder took the lock (millisecond precision).
	Since time.Time
	// Value is what the holder announces (a leader's value, WithMetadata).
	Value string
}

// encode returns the record as writemeta.lua stores it after the owner's
// digest: term, rev, since (Unix ms), value, separated by newlines (the value
// last: it may contain newlines).
func (m Meta) encode() string {
	return strconv.FormatUint(m.Term, 10) + "\n" + strconv.FormatUint(m.Rev, 10) + "\n" +
		strconv.FormatInt(m.Since.UnixMilli(), 10) + "\n" + m.Value
}

// ParseMeta reads a record as ReadMeta's script returns it (term, rev,
// since, value).
func ParseMeta(rec string) (Meta, error) {
	term, rest, ok1 := strings.Cut(rec, "\n")
	rev, rest, ok2 := strings.Cut(rest, "\n")
	since, value, ok3 := strings.Cut(rest, "\n")
	t, err1 := strconv.ParseUint(term, 10, 64)
	r, err2 := strconv.ParseUint(rev, 10, 64)
	s, err3 := strconv.ParseInt(since, 10, 64)
	if !ok1 || !ok2 || !ok3 || err1 != nil || err2 != nil || err3 != nil {
		return Meta{}, fmt.Errorf("%w: metadata record %.40q", ErrUnexpectedReply, rec)
	}
	return Meta{Term: t, Rev: r, Since: time.UnixMilli(s), Value: strings.Clone(value)}, nil
}

// ParseStoredMeta reads the value of a metadata key as stored (the owner's
// SHA-1, then the record), for a reader that has the lock key's value
// (token; "" when the lock key is missing): ok is false when the record is
// not the current holder's (no holder, or a leftover of an earlier one).
// redlock status reads the keys with plain GETs and uses it.
func ParseStoredMeta(stored, token string) (m Meta, ok bool, err error) {
	if token == "" || len(stored) < 40 {
		return Meta{}, false, nil
	}
	sum := sha1.Sum([]byte(token))
	if stored[:40] != hex.EncodeToString(sum[:]) {
		return Meta{}, false, nil
	}
	m, err = ParseMeta(stored[40:])
	return m, err == nil, err
}

//go:embed writemeta.lua
var writeMetaSrc string

//go:embed readmeta.lua
var readMetaSrc string

var (
	writeMetaScript = newScript("writemeta", 2, 1, writeMetaSrc)
	readMetaScript  = newScript("readmeta", 2, 1, readMetaSrc)
)

var (
	// WriteMetaScript: KEYS lock, metadata; ARGV token, TTL ms, record (see
	// Meta). Reply 1 when written (the lock key held the token).
	WriteMetaScript = Script{writeMetaScript}
	// ReadMetaScript: KEYS lock, metadata. Reply the record (bulk string)
	// when the metadata is the current holder's, nil otherwise.
	ReadMetaScript = Script{readMetaScript}
)

// WriteMetaCall is WriteMeta's call.
func WriteMetaCall(key, token string, m Meta, ttl time.Duration) Call {
	return Call{WriteMetaScript, []string{key, MetaKey(key)}, []any{token, max(ttl.Milliseconds(), 1), m.encode()}}
}

// ReadMetaCall is ReadMeta's call.
func ReadMetaCall(key string) Call {
	return Call{ReadMetaScript, []string{key, MetaKey(key)}, nil}
}

// WriteMeta implements Node.
func (s *Scripted) WriteMeta(ctx context.Context, key, token string, m Meta, ttl time.Duration) (bool, error) {
	return s.flag(ctx, WriteMetaCall(key, token, m, ttl))
}

// ReadMeta implements Node.
func (s *Scripted) ReadMeta(ctx context.Context, key string) (Meta, bool, error) {
	reply, err := s.run(ctx, ReadMetaCall(key))
	if err != nil || reply == nil {
		return Meta{}, false, err
	}
	var rec string
	switch v := reply.(type) {
	case string:
		rec = v
	case []byte:
		rec = string(v)
	default:
		return Meta{}, false, fmt.Errorf("%w: readmeta: %v", ErrUnexpectedReply, reply)
	}
	m, err := ParseMeta(rec)
	return m, err == nil, err
}

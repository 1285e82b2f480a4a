package redlock

import (
	"strings"
	"testing"
)

func TestNewLockStrings(t *testing.T) {
	for _, prefix := range []string{"", "redlock:", "a{b}"} {
		for _, r := range []string{"r", "orders:42", "{x}", "}x", "a{b}c", "é"} {
			token, key, fence, err := newLockStrings(prefix, r)
			if err != nil {
				t.Fatal(err)
			}
			if key != LockKey(prefix, r) || fence != FenceKey(prefix, r) {
				t.Errorf("%q %q: keys %q %q, want %q %q", prefix, r, key, fence, LockKey(prefix, r), FenceKey(prefix, r))
			}
			if len(token) != 32 || strings.Trim(token, "0123456789abcdef") != "" {
				t.Errorf("token %q is not 32 hex digits", token)
			}
		}
	}
	a, _, _, _ := newLockStrings("", "r")
	b, _, _, _ := newLockStrings("", "r")
	if a == b {
		t.Error("two tokens alike")
	}
}

package redlock

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// FenceSuffix ends the fence-counter key of a resource: FenceKey(p, r) is
// LockKey(p, r) + FenceSuffix.
const FenceSuffix = ":fence"

// HashTag returns the Redis Cluster hash tag shared by every key of resource: the
// resource itself when it contains no brace, otherwise "#" followed by 16 hex
// digits of its SHA-256. A resource with braces cannot be its own tag: Cluster
// hashes only the text between the first "{" and the first "}" after it, so a
// name such as "}x" would give the lock key an empty tag and its fence key
// another slot.
func HashTag(resource string) string {
	if !strings.ContainsAny(resource, "{}") {
		return resource
	}
	sum := sha256.Sum256([]byte(resource))
	return "#" + hex.EncodeToString(sum[:8])
}

// LockKey returns the key that holds the lock of resource on every node:
// prefix+"{"+resource+"}" for a resource without braces, and
// prefix+"{"+HashTag(resource)+"}"+resource otherwise. Every key of a resource
// (see FenceKey) lies in the Cluster hash slot of its tag; distinct resources
// have distinct keys. resource must not be empty (the Client refuses an empty
// name).
func LockKey(prefix, resource string) string {
	tag := HashTag(resource)
	if tag == resource {
		return prefix + "{" + resource + "}"
	}
	return prefix + "{" + tag + "}" + resource
}

// FenceKey returns the key of resource's fence counter, in the hash slot of
// LockKey(prefix, resource).
func FenceKey(prefix, resource string) string {
	return LockKey(prefix, resource) + FenceSuffix
}

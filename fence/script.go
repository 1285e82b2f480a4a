package fence

// GuardedWriteSource returns the Lua source of the guarded write behind
// WriteRedis, for helpers built on other Redis clients (the goredis and rueidis
// adapter modules): KEYS[1] the hash, ARGV[1] the token (decimal uint64), ARGV[2]
// the value; the reply is {1, token} when written and {0, highest} when refused.
func GuardedWriteSource() string { return guardedWriteSrc }

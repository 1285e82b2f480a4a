module github.com/redlock-go/redlock/bench

go 1.26.0

replace github.com/redlock-go/redlock => ../

replace github.com/redlock-go/redlock/goredis => ../goredis

replace github.com/redlock-go/redlock/rueidis => ../rueidis

require (
	github.com/bsm/redislock v0.9.4
	github.com/go-redsync/redsync/v4 v4.18.1
	github.com/gomodule/redigo v1.9.3
	github.com/redis/go-redis/v9 v9.23.0
	github.com/redis/rueidis v1.0.79
	github.com/redlock-go/redlock v0.1.0
	github.com/redlock-go/redlock/goredis v0.1.0
	github.com/redlock-go/redlock/rueidis v0.1.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

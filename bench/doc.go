// Package bench compares this library with its peers on real redis-server
// processes on loopback: go-redsync v4 (with its redigo pool) at N=1, 3, 5 and
// bsm/redislock at N=1.
//
// It is a module of its own (github.com/redlock-go/redlock/bench, with a replace
// directive to the root) so that the core module never depends on the libraries
// it is compared with.
//
// The package provides three things:
//
//   - a small redis-server launcher (Server, Cluster): free loopback ports,
//     persistence off, pause (SIGSTOP), resume (SIGCONT) and kill (SIGKILL);
//   - one Locker adapter per library (NewRedlock, NewRedsync, NewRedislock), so
//     that every scenario drives every library through the same loop; and
//     this library over the adapter nodes of its goredis and rueidis modules
//     (NewRedlockGoredis, NewRedlockRueidis: modules required with replace
//     directives to ../goredis and ../rueidis), compared with its own node by
//     the command's clients-adapters phase;
//   - the scenarios (Sequential, Throughput, Contended) and the report writers
//     (WriteMarkdown, WriteSVG) used by the command cmd/redlock-bench, which
//     produces docs/benchmarks.md and docs/benchmarks.svg; and for its section
//     "Beyond a mutex" (Beyond, issue 27), the same scenarios over lockers that
//     campaign and resign (ElectionLocker) or take read and write locks
//     (RWLocker), and the semaphore comparison (SemaphoreCells, RunSemaphore:
//     the shipped slots design against a counting-quorum prototype, which at
//     N=1 is a single-node Redisson-style baseline), also printed on its own by
//     cmd/redlock-sem-bench.
//
// The testing.B benchmarks of this package (go test -run - -bench .) measure the
// same operations with the standard tooling.
package bench

// Package harness runs real redis-server nodes in Docker containers and
// injects faults into them, for testing the redlock client against the
// failures the Redlock algorithm has to survive: crashed and restarted nodes,
// hung (paused) nodes, network partitions, wall-clock jumps and slow links.
//
// No registry is needed. On first use in a test binary the package builds a
// FROM scratch image from the host's redis-server binary (looked up as
// /usr/bin/redis-server, then on $PATH), every shared library ldd lists for
// it, and a small LD_PRELOAD library (faketime.c, compiled with gcc) that can
// shift the node's wall clock. The image is tagged
// redlock-test-redis:<hash of its inputs>, so it is rebuilt only when an input
// changes, and it is never pulled.
//
// A test starts a cluster with Start and drives the nodes through *Node:
//
//	c := harness.Start(t, 3, harness.WithClockJumps())
//	conn, _ := redis.Dial("tcp", c.Node(0).Addr())
//	require.NoError(t, c.Node(1).Kill())
//	require.NoError(t, c.Node(1).Start())
//	require.NoError(t, c.Node(2).SetClockOffset(time.Minute))
//
// Every cluster gets its own user-defined Docker network; containers publish
// Redis on 127.0.0.1 only. Docker allocates a new host port whenever a
// container is started again or reconnected to its network, so Node.Addr
// changes after Start, Restart and Reconnect. Node.ProxyAddr is a host-side TCP
// proxy in front of the node that keeps one address for the node's whole life
// and can add latency (Node.SetLatency); point clients at it when they must
// survive restarts without being reconfigured. The proxy forwards to the
// container's own address on the cluster's network when the host reaches it
// (a local daemon on Linux), so that Docker's userland proxy (docker-proxy)
// does not copy every byte a second time: it took 43 CPU-seconds of a CI run
// on 2 cores, beside the fault scenarios. Killed, stopped and disconnected
// nodes then look through the proxy as they did through the published port:
// the harness closes the proxy's connections when it injects the fault and
// refuses new ones until the node answers again. REDLOCK_HARNESS_VIA_PORT=1
// forwards to the published port instead.
//
// Creating a cluster costs about 2 s of Docker work and removing it about
// 1 s. With WithReuse, a passed test's cluster is reset (Cluster.Reset: every
// node running, unpaused and connected, no latency, no clock offset, no data,
// scripts, ACL users or connections) and kept for the next Start with the same
// size and options in the same test binary, whose TestMain removes what is
// kept (RemoveKept); a failed test's cluster is removed, its logs printed.
//
// Docker resources carry the label redlock.test=1 and are removed in
// t.Cleanup (kept clusters by RemoveKept). If a test binary is killed or
// panics before its cleanups run, the next binary's first cluster removes
// what it left (while no process on the host has a cluster, whatever carries
// the label is a leftover); until then they can be found with
//
//	docker ps -a --filter label=redlock.test=1
//	docker network ls --filter label=redlock.test=1
//
// go test runs the packages of a module in parallel; Start serializes clusters
// across test binaries with a lock file in os.TempDir (redlock-harness.lock),
// so that only one package's containers run at a time. Clusters of one test
// binary may coexist. A binary that keeps clusters for reuse holds the lock
// until its TestMain calls RemoveKept: the other binary's tests wait for its
// whole run (well within go test's default 10-minute timeout here: about
// 130 s for the scenario package).
//
// When no Docker daemon answers (or redis-server or gcc is missing) Start
// skips the test, unless REDLOCK_REQUIRE_DOCKER=1 is set, in which case it
// fails it. Bind mounts (the data directory of WithAOF and the clock offset
// directory of WithClockJumps) assume the daemon shares the test's file
// system, i.e. a local daemon.
package harness

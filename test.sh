#!/usr/bin/env bash
# The test command (README, .ci/run): go test -race ./... in every module.
#
#   ./test.sh                 # every module
#   ./test.sh . sim           # only these modules (directories), in the same order
#
# Each module's output goes to a log, printed with the module's duration and CPU time when
# it is done. When a module fails, its --- FAIL blocks and the last 150 lines of
# its output are printed again at the very end, so that the failure can be read
# from a CI log alone; the status is then 1, once every module has run.
#
# Order, for 2 cores: every module's test binaries are compiled first, two
# modules at a time (go test -race -exec true: nothing runs). Then two lanes:
# the root module (whose tests measure real time the most), then the fault
# suite; beside them, first the modules whose tests mostly wait (the
# command's, the adapters': quarantines, clusters and failovers, at a few
# CPU-seconds each) side by side, then the other short modules one after
# another, the consumer check last (internal/tools: builds a module outside
# the repository against the working tree's modules), then the simulation
# (virtual time, CPU-bound), beside the fault suite. The root module and
# the fault suite, the two longest after the simulation, never overlap: the
# fault suite's containers made the root module's timed tests fail (5 of 8
# three-lane runs, 3 December 2026).
# REDLOCK_TEST_SERIAL=1 runs every module one after another instead.
#
# The fault scenarios and the simulation append their result lines (go test
# prints a passing package's output only with -v) to $REDLOCK_FAULT_REPORT and
# $REDLOCK_SIM_REPORT, a temporary file unless set; printed at the end.
#
# redis-server and redis-sentinel on PATH and a Docker daemon are needed, or
# the tests that need them skip (fail under REDLOCK_REQUIRE_REDIS=1 and
# REDLOCK_REQUIRE_DOCKER=1, as in CI).
set -uo pipefail
cd "$(dirname "$0")"

# -trimpath: the build cache's keys then name third-party packages by module
# and version, not by the module cache's directory, so that the consumer
# check (internal/tools), which fetches into a module cache of its own,
# reuses the race-built packages of every module's tests instead of
# compiling go-redis, rueidis, Prometheus and OpenTelemetry again (79 s of a
# cold CI run on 2 cores). File names in failures then read
# github.com/redlock-go/redlock/lock.go:12, not /path/to/clone/lock.go:12.
export GOFLAGS="-trimpath${GOFLAGS:+ $GOFLAGS}"

first="."                                      # lane 1: the root module, then
alone="faults"                                 # the fault suite
waiting="cmd/redlock goredis rueidis"          # lane 2: these side by side, then
rest="metrics metrics/otel bench internal/tools" # these, then
untimed="sim"                                  # the simulation

if [ $# -gt 0 ]; then # keep only the modules named, in this script's order
	for a in "$@"; do
		case " $first $alone $waiting $rest $untimed " in
		*" ${a%/} "*) ;;
		*) echo "test.sh: $a is not a module directory ($first $alone $waiting $rest $untimed)" >&2; exit 2 ;;
		esac
	done
	only() {
		local m a out=""
		for m in $1; do for a in "${@:2}"; do [ "$m" = "${a%/}" ] && out="$out $m"; done; done
		echo "$out"
	}
	first=$(only "$first" "$@")
	alone=$(only "$alone" "$@")
	waiting=$(only "$waiting" "$@")
	rest=$(only "$rest" "$@")
	untimed=$(only "$untimed" "$@")
fi

logs=$(mktemp -d)
report=${REDLOCK_FAULT_REPORT:-$logs/report.txt}
export REDLOCK_FAULT_REPORT="$report" REDLOCK_SIM_REPORT="${REDLOCK_SIM_REPORT:-$report}"
touch "$REDLOCK_FAULT_REPORT" "$REDLOCK_SIM_REPORT"

slug() { if [ "$1" = . ]; then echo root; else echo "${1//\//_}"; fi; }

# say prints its input in one piece, even when two lanes finish together.
say() {
	if command -v flock >/dev/null 2>&1; then
		flock "$logs/.out" cat
	else
		cat
	fi
}

# warm compiles (and links) the race-enabled test binaries of module $1.
warm() {
	go -C "$1" test -race -count=1 -exec true ./... >"$logs/warm-$(slug "$1").log" 2>&1 ||
		echo "(compiling $1 failed: its tests below say why)" | say
}

# flags prints module $1's own go test flags: the adapters' tests mostly
# wait (quarantines, clusters forming), each on servers of its own, and run
# side by side beyond GOMAXPROCS (2 here) at little CPU; their failover
# tests do not ask to (t.Parallel) and run alone first. The root module's
# parallel tests (t.Parallel) are those that mostly wait too (leases,
# quarantines, restarts, uptimes: about 60 s of waiting at a few CPU-s),
# four at a time.
flags() {
	case $1 in
	goredis | rueidis) echo "-parallel 8" ;;
	.) echo "-parallel 4" ;;
	esac
}

# run runs go test -race ./... in module $1, with -count=1: with -trimpath a
# fresh clone's test results have the same cache keys as an earlier clone's,
# and go test would print those (cached) instead of running the tests.
run() {
	local m=$1 log start status=0 took verdict cpu
	log=$logs/$(slug "$1").log
	start=$SECONDS
	# In a subshell of its own, whose `times` are then the CPU time (user
	# and system) of go test and the test binaries it ran: where a run's
	# CPU goes (the fault suite's containers are not counted).
	(
		go -C "$m" test -race -count=1 $(flags "$m") ./... >"$log" 2>&1
		s=$?
		times >"$log.times"
		exit "$s"
	) || status=$?
	took=$((SECONDS - start))
	cpu=$(awk 'NR == 2 { n = 0; for (i = 1; i <= 2; i++) { split($i, p, "m"); sub("s", "", p[2]); n += p[1] * 60 + p[2] } printf "%d", n }' "$log.times" 2>/dev/null)
	verdict=ok
	if [ "$status" != 0 ]; then
		verdict="FAIL (status $status)"
		echo "$m" >>"$logs/failed"
	fi
	printf '%-14s %4ds  CPU %4ss  %s\n' "$m" "$took" "${cpu:-?}" "$verdict" >>"$logs/durations"
	{
		echo "=== $m: go test -race ./... — $verdict in ${took}s (CPU ${cpu:-?}s)"
		cat "$log"
	} | say
	return "$status"
}

# lane runs modules one after another; its status is 1 if any failed.
lane() {
	local s=0 m
	for m in "$@"; do run "$m" || s=1; done
	return "$s"
}

total=$SECONDS
go version

start=$SECONDS
# Two lanes of compilation: every other module in each.
warmed=0
for m in $first $untimed $waiting $rest $alone; do
	if [ $((warmed % 2)) = 0 ]; then evens="${evens:-} $m"; else odds="${odds:-} $m"; fi
	warmed=$((warmed + 1))
done
(for m in ${evens:-}; do warm "$m"; done) &
(for m in ${odds:-}; do warm "$m"; done) &
wait
echo "=== compiled every module's tests in $((SECONDS - start))s"

if [ "${REDLOCK_TEST_SERIAL:-}" = 1 ]; then
	lane $first $waiting $rest $untimed
	lane $alone
else
	# The fault suite's clusters run one at a time
	# (faults/harness/hostlock.go), after the root module. The long poles
	# are the root module then the fault suite (about 120 s + 200 s on an
	# AMD EPYC machine), and beside them the waiting modules (about 50 s
	# side by side), the short ones (about 50 s) and the simulation (about
	# 240 s: 270 CPU-s, beside the fault suite, whose containers and their
	# networking keep more than a core busy: docs/testing.md).
	(
		for m in $waiting; do run "$m" & done
		wait
		lane $rest
		lane $untimed
	) &
	lane $first
	lane $alone
	wait
fi

echo "--- durations (total $((SECONDS - total))s)"
cat "$logs/durations"
echo "--- fault and simulation results"
cat "$REDLOCK_FAULT_REPORT"
if [ "$REDLOCK_SIM_REPORT" != "$REDLOCK_FAULT_REPORT" ]; then
	cat "$REDLOCK_SIM_REPORT"
fi

status=0
if [ -s "$logs/failed" ]; then
	status=1
	while read -r m; do
		log=$logs/$(slug "$m").log
		echo "--- $m FAILED: its failing tests"
		# A --- FAIL line and the indented lines under it (the test's log).
		awk '/^ *--- FAIL/ { on = 1; print; next } on && /^ / { print; next } { on = 0 }' "$log"
		echo "--- $m FAILED: the last 150 lines of its output ($log)"
		tail -n 150 "$log"
	done <"$logs/failed"
else
	rm -rf "$logs"
fi
exit "$status"

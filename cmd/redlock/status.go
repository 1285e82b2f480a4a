package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/node"
)

const statusHelpText = `Usage: redlock status [flags] NAME

Shows, for every node, its health state as the library reports it (ok,
failing:KIND with the kind of error, quarantined:LEFT with --restart-quarantine),
whether the lock NAME is held, the time left on its lease (Redis PTTL), a digest
of the holder's token (never the token itself), and the node's fencing counter;
then on how many nodes one holder has it, against the majority a holder needs,
and the holder's metadata if it stored any: an election's leader (redlock elect,
Client.Campaign) with its value, term and since when, or the value of a lock
taken with WithMetadata.
Nodes that do not answer within --timeout are listed with the error. It only
reads: it never takes, extends or releases the lock.

Flags:
%s
Environment:
  REDLOCK_NODES            the node URLs, when --nodes is not given
%s
Exit status:
  0   a majority of the nodes answered (whether the lock is held or not)
  1   fewer than a majority answered: whether the lock is held cannot be told
  2   usage error: the command line does not parse (unknown flag, a value that
      is not a duration, missing NAME, an argument after NAME)
  78  bad configuration: node URLs (an empty --nodes too), credential or TLS
      files, option values out of range

Examples:
  redlock status nightly-report
  redlock status --nodes redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379 db-migrate
`

// nodeStatus is what one node says about the lock.
type nodeStatus struct {
	name     string
	err      error
	held     bool
	pttl     int64  // milliseconds; -1: no expiry
	holder   string // digest of the token
	fence    uint64
	hasFence bool
	info     string     // INFO server, to tell two addresses of one instance
	meta     *node.Meta // the holder's metadata (WithMetadata, a leader's record), if the holder wrote one
	// quarantine is the restart quarantine the node is in (--restart-quarantine)
	quarantine *node.QuarantineError
}

// state is the node's health state, in the words of redlock.NodeHealth.
func (s nodeStatus) state() string {
	switch {
	case s.err != nil:
		return string(redlock.NodeFailing) + ":" + redlock.NodeErrorKind(s.err)
	case s.quarantine != nil:
		return string(redlock.NodeQuarantined) + ":" + time.Until(s.quarantine.Until).Round(100*time.Millisecond).String()
	}
	return string(redlock.NodeOK)
}

func statusCmd(args []string, stdout, stderr io.Writer) int {
	flags := newFlagSet("status", stderr)
	nodesFlag := flags.String("nodes", "", "comma-separated node `URLS` (default $"+envNodes+")")
	prefix := flags.String("key-prefix", redlock.DefaultKeyPrefix, "`PREFIX` of the lock's keys")
	var timeout, quarantine time.Duration
	durationVar(flags, &timeout, "timeout", 2*time.Second, "how long to wait for each node")
	durationVar(flags, &quarantine, "restart-quarantine", 0,
		"show nodes up less than `D` as quarantined, as node.WithRestartQuarantine(D) would (0: off)")
	var conn connFlags
	conn.register(flags)
	help := fmt.Sprintf(statusHelpText, flagHelp(flags), connEnvHelp)

	name, rest, code, ok := parseNamed(flags, "status", args, help, stdout, stderr)
	if !ok {
		return code
	}
	if len(rest) > 0 {
		return usageError(stderr, "status", "unexpected argument %q after NAME", rest[0])
	}
	ns, err := checkStatusArgs(name, *prefix, *nodesFlag, flagGiven(flags, "nodes"), timeout)
	if err == nil && quarantine != 0 {
		if err = checkDuration("restart-quarantine", quarantine, true); err == nil {
			_, err = node.NewRestartGuard(quarantine)
		}
	}
	if err == nil {
		err = conn.apply(ns)
	}
	if err != nil {
		return configError(stderr, "status", "%v", err)
	}
	key, fenceKey := redlock.LockKey(*prefix, name), redlock.FenceKey(*prefix, name)
	statuses := readStatuses(ns, key, fenceKey, timeout)
	if quarantine > 0 {
		restartQuarantines(statuses, quarantine)
	}

	fmt.Fprintf(stdout, "lock %q (key %s) on %d nodes, majority %d\n\n", name, key, len(ns.urls), ns.majority())
	sum := printStatuses(stdout, ns, statuses, timeout)
	fmt.Fprintln(stdout)
	sum.print(stdout, len(ns.urls), ns.majority())
	if n := len(ns.urls); n%2 == 0 {
		fmt.Fprintf(stdout, "note: %d nodes, an even count, tolerate %d failed nodes, as %d would\n", n, n-ns.majority(), n-1)
	}
	if sum.answered < ns.majority() {
		return 1
	}
	return 0
}

// checkStatusArgs validates status's option values and parses its nodes.
func checkStatusArgs(name, prefix, nodes string, nodesGiven bool, timeout time.Duration) (*nodeSet, error) {
	if err := checkDuration("timeout", timeout, false); err != nil {
		return nil, err
	}
	if strings.ContainsAny(prefix, "{}") {
		return nil, fmt.Errorf("--key-prefix %q: must not contain braces", prefix)
	}
	if len(name) > redlock.MaxResourceLen {
		return nil, fmt.Errorf("lock name of %d bytes exceeds %d", len(name), redlock.MaxResourceLen)
	}
	return parseNodes(nodes, nodesGiven)
}

// readStatuses asks every node at once.
func readStatuses(ns *nodeSet, key, fenceKey string, timeout time.Duration) []nodeStatus {
	statuses := make([]nodeStatus, len(ns.urls))
	var wg sync.WaitGroup
	for i := range ns.urls {
		wg.Go(func() {
			dial := func(ctx context.Context) (redis.Conn, error) { return ns.dial(ctx, i, timeout) }
			statuses[i] = readStatus(dial, key, fenceKey, timeout)
			statuses[i].name = ns.names[i]
		})
	}
	wg.Wait()
	sameInstances(statuses)
	return statuses
}

// statusSummary is what the nodes that answered say together.
type statusSummary struct {
	answered int
	holders  map[string]int       // holder digest -> nodes holding for it
	metas    map[string]node.Meta // holder digest -> its newest metadata record
	maxFence uint64
	anyFence bool
}

// printStatuses writes one table row per node and sums up the answers.
func printStatuses(w io.Writer, ns *nodeSet, statuses []nodeStatus, timeout time.Duration) statusSummary {
	sum := statusSummary{holders: map[string]int{}, metas: map[string]node.Meta{}}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tHELD\tTTL\tHOLDER\tFENCE")
	for _, s := range statuses {
		if s.err != nil {
			fmt.Fprintf(tw, "%s\t%s\terror: %s\n", s.name, s.state(), ns.scrub(describeNodeErr(s.err, timeout)))
			continue
		}
		sum.answered++
		held, ttl, holder, fence := "no", "-", "-", "-"
		if s.held {
			held, holder = "yes", s.holder
			sum.holders[s.holder]++
			if m, ok := sum.metas[s.holder]; s.meta != nil && (!ok || s.meta.Term > m.Term || s.meta.Term == m.Term && s.meta.Rev > m.Rev) {
				sum.metas[s.holder] = *s.meta
			}
			ttl = "no expiry"
			if s.pttl >= 0 {
				ttl = (time.Duration(s.pttl) * time.Millisecond).String()
			}
		}
		if s.hasFence {
			fence = strconv.FormatUint(s.fence, 10)
			sum.anyFence = true
			sum.maxFence = max(sum.maxFence, s.fence)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.name, s.state(), held, ttl, holder, fence)
	}
	tw.Flush()
	return sum
}

// print writes the verdict on n nodes with majority m.
func (sum statusSummary) print(w io.Writer, n, m int) {
	if sum.answered < m {
		fmt.Fprintf(w, "only %d of %d nodes answered (majority %d): cannot tell whether the lock is held\n", sum.answered, n, m)
	} else {
		top, k := topHolder(sum.holders)
		switch {
		case k == 0:
			fmt.Fprintf(w, "held on 0 of %d nodes (majority %d): free\n", n, m)
		case k >= m:
			fmt.Fprintf(w, "held on %d of %d nodes (majority %d) by holder %s\n", k, n, m, top)
		default:
			fmt.Fprintf(w, "held on %d of %d nodes (majority %d): no holder has a majority (an acquisition in progress, or leftovers that expire by themselves)\n", k, n, m)
		}
		if len(sum.holders) > 1 {
			fmt.Fprintf(w, "holders: %s\n", holderList(sum.holders))
		}
		if m, ok := sum.metas[top]; ok && k > 0 {
			printMeta(w, top, m)
		}
	}
	if sum.anyFence {
		fmt.Fprintf(w, "fencing counter: %d (highest of the nodes that answered)\n", sum.maxFence)
	} else if sum.answered > 0 {
		fmt.Fprintln(w, "fencing counter: none (no fenced holder yet)")
	}
}

// printMeta writes the metadata of holder: WithMetadata's value, or an
// election's leader's value and term (its fencing token), and since when.
func printMeta(w io.Writer, holder string, m node.Meta) {
	term := ""
	if m.Term > 0 {
		term = fmt.Sprintf(", term %d", m.Term)
	}
	fmt.Fprintf(w, "metadata of holder %s: %q%s, since %s (%v ago)\n", holder, m.Value, term,
		m.Since.UTC().Format(time.RFC3339Nano), time.Since(m.Since).Round(time.Second))
}

// readStatus reads the lock key, its PTTL, the fence counter and the
// holder's metadata from one node, in one transaction.
func readStatus(dial func(context.Context) (redis.Conn, error), key, fenceKey string, timeout time.Duration) nodeStatus {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := dial(ctx)
	if err != nil {
		return nodeStatus{err: err}
	}
	defer c.Close()
	for _, args := range [][]any{{"MULTI"}, {"GET", key}, {"PTTL", key}, {"GET", fenceKey}, {"GET", node.MetaKey(key)}} {
		if err := c.Send(args[0].(string), args[1:]...); err != nil {
			return nodeStatus{err: err}
		}
	}
	vals, err := redis.Values(redis.DoContext(c, ctx, "EXEC"))
	if err != nil {
		return nodeStatus{err: err}
	}
	if len(vals) != 4 {
		return nodeStatus{err: fmt.Errorf("unexpected reply %v", vals)}
	}
	var s nodeStatus
	s.info, _ = redis.String(redis.DoContext(c, ctx, "INFO", "server")) // optional: ACLs may refuse it
	token, err := redis.String(vals[0], nil)
	switch {
	case err == redis.ErrNil:
	case err != nil:
		return nodeStatus{err: fmt.Errorf("lock key %s: %w", key, err)}
	default:
		s.held, s.holder = true, redlock.Digest(token)
		if s.pttl, err = redis.Int64(vals[1], nil); err != nil {
			return nodeStatus{err: fmt.Errorf("PTTL %s: %w", key, err)}
		}
		if stored, err := redis.String(vals[3], nil); err == nil { // the holder's metadata, if it is this holder's
			if m, ok, _ := node.ParseStoredMeta(stored, token); ok {
				s.meta = &m
			}
		}
	}
	f, err := redis.String(vals[2], nil)
	switch {
	case err == redis.ErrNil:
	case err != nil:
		return nodeStatus{err: fmt.Errorf("fence counter %s: %w", fenceKey, err)}
	default:
		if s.fence, err = strconv.ParseUint(f, 10, 64); err != nil {
			return nodeStatus{err: fmt.Errorf("fence counter %s: %q is not a number", fenceKey, f)}
		}
		s.hasFence = true
	}
	return s
}

// sameInstances marks as failed the nodes that reached a process an earlier
// node reached (the same run_id): one instance is one vote.
func sameInstances(statuses []nodeStatus) {
	set := node.NewInstances()
	for i := range statuses {
		s := &statuses[i]
		if s.err != nil || s.info == "" {
			continue
		}
		if err := set.Observe(s.name, s.info); errors.Is(err, node.ErrSameInstance) {
			s.err = err
		}
	}
}

// restartQuarantines marks the nodes that a restart quarantine of d would
// keep out of acquisitions (node.RestartGuard's rule on their INFO server).
// A node that answered without INFO (an ACL) is left as it is.
func restartQuarantines(statuses []nodeStatus, d time.Duration) {
	for i := range statuses {
		s := &statuses[i]
		if s.err != nil || s.info == "" {
			continue
		}
		g, err := node.NewRestartGuard(d)
		if err != nil {
			return
		}
		if err := g.Observe(s.info, time.Now()); err != nil {
			continue
		}
		errors.As(g.Refusal(), &s.quarantine)
	}
}

// topHolder returns the holder on the most nodes, and on how many.
func topHolder(holders map[string]int) (string, int) {
	top, k := "", 0
	for h, c := range holders {
		if c > k || (c == k && h < top) {
			top, k = h, c
		}
	}
	return top, k
}

func holderList(holders map[string]int) string {
	hs := make([]string, 0, len(holders))
	for h := range holders {
		hs = append(hs, h)
	}
	sort.Slice(hs, func(i, j int) bool {
		if holders[hs[i]] != holders[hs[j]] {
			return holders[hs[i]] > holders[hs[j]]
		}
		return hs[i] < hs[j]
	})
	parts := make([]string, len(hs))
	for i, h := range hs {
		parts[i] = fmt.Sprintf("%s on %d", h, holders[h])
	}
	return strings.Join(parts, ", ")
}

package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/node"
)

// envNodes names the environment variable that gives the nodes when --nodes
// does not.
const envNodes = "REDLOCK_NODES"

// nodeSet is the validated list of node URLs, with the passwords they contain
// so that no message ever shows one.
type nodeSet struct {
	urls    []string
	parsed  []*node.URL
	names   []string // canonical host:port/db, as in the library's errors
	secrets []string
	tls     *tls.Config // rediss:// nodes; nil: the defaults
}

// parseNodes returns the nodes given by the --nodes flag value or, when the
// flag was not given, by REDLOCK_NODES. A --nodes given empty is an error, not
// a fall-back to REDLOCK_NODES: it is usually a variable that is not set
// (--nodes "$NODES"), and the environment may name other nodes. Errors name
// the source and the position of a bad URL, never a password.
func parseNodes(flagValue string, flagGiven bool) (*nodeSet, error) {
	raw, from := flagValue, "--nodes"
	if flagGiven && strings.TrimSpace(raw) == "" {
		return nil, fmt.Errorf("--nodes %q: no node URLs (an unset variable?): give redis://host1:6379,redis://host2:6379,... "+
			"or leave --nodes out to use %s", raw, envNodes)
	}
	if !flagGiven {
		raw, from = os.Getenv(envNodes), envNodes
	}
	if strings.TrimSpace(raw) == "" {
		return nil, errors.New("no nodes: give --nodes redis://host1:6379,redis://host2:6379,... or set " + envNodes)
	}
	parts := strings.Split(raw, ",")
	ns := &nodeSet{}
	for _, p := range parts {
		if u, err := node.Parse(strings.TrimSpace(p)); err == nil && u.Password != "" {
			ns.secrets = append(ns.secrets, u.Password)
		}
	}
	if len(parts) > redlock.MaxNodes {
		return nil, fmt.Errorf("%s: %d nodes is more than the maximum %d", from, len(parts), redlock.MaxNodes)
	}
	seen := make(map[string]int, len(parts)) // host:port: dbs of one instance are one node
	for i, p := range parts {
		p = strings.TrimSpace(p)
		where := fmt.Sprintf("%s: node %d of %d", from, i+1, len(parts))
		if p == "" {
			return nil, fmt.Errorf("%s is empty (a stray comma?)", where)
		}
		if !strings.Contains(p, "://") {
			shown := node.Redact(p)
			if scheme, _, _ := strings.Cut(p, ":"); scheme != "redis" && scheme != "rediss" {
				return nil, fmt.Errorf("%s: %q is not a URL: write redis://%s", where, shown, shown)
			}
			return nil, fmt.Errorf("%s: %q is not a URL of the form redis://host[:port][/db]", where, shown)
		}
		u, err := node.Parse(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %s", where, strings.TrimPrefix(err.Error(), "node: "))
		}
		if j, dup := seen[u.Addr()]; dup {
			return nil, fmt.Errorf("%s: %s is the Redis instance of node %d (%s): each node must be a different, independent Redis instance",
				where, u.Name(), j+1, ns.names[j])
		}
		seen[u.Addr()] = i
		ns.urls = append(ns.urls, p)
		ns.names = append(ns.names, u.Name())
		ns.parsed = append(ns.parsed, u)
	}
	return ns, nil
}

// majority returns the number of nodes that make a majority.
func (ns *nodeSet) majority() int { return len(ns.urls)/2 + 1 }

// scrub hides every known password in msg.
func (ns *nodeSet) scrub(msg string) string {
	if ns == nil {
		return msg
	}
	for _, s := range ns.secrets {
		msg = strings.ReplaceAll(msg, s, "xxxxx")
	}
	return msg
}

// describeNodeErr says what went wrong with one node, briefly.
func describeNodeErr(err error, timeout time.Duration) string {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return fmt.Sprintf("no answer within %v", timeout)
	}
	return err.Error()
}

// describeQuorum explains a failed acquisition, extension or release in one
// line, followed by one indented line per failed node.
func (ns *nodeSet) describeQuorum(qe *redlock.QuorumError, timeout time.Duration) string {
	var b strings.Builder
	// A majority of refusals and failures decides an operation; otherwise it
	// was cut short by its deadline while nodes had not answered.
	decided := qe.Refused+qe.Failed > qe.Nodes-qe.Need
	switch {
	case qe.Op == "fence":
		fmt.Fprintf(&b, "could not obtain a fencing token (%d of %d nodes needed)", qe.Need, qe.Nodes)
		if qe.Cause != nil {
			fmt.Fprintf(&b, ": %v", qe.Cause)
		}
	case qe.Agreed >= qe.Need:
		fmt.Fprintf(&b, "%d of %d nodes agreed, but too late: the lease had no validity left", qe.Agreed, qe.Nodes)
	case !decided:
		fmt.Fprintf(&b, "no majority in time: %d of %d nodes agreed (%d needed), %d did not answer in time",
			qe.Agreed, qe.Nodes, qe.Need, qe.Nodes-qe.Agreed-qe.Refused-qe.Failed)
		if qe.Refused > 0 {
			fmt.Fprintf(&b, ", %d refused", qe.Refused)
		}
		if qe.Failed > 0 {
			fmt.Fprintf(&b, ", %d failed", qe.Failed)
		}
	case qe.Failed == 0:
		fmt.Fprintf(&b, "held elsewhere (%d of %d nodes refused)", qe.Refused, qe.Nodes)
	case qe.Refused == 0:
		fmt.Fprintf(&b, "too few nodes reachable: %d of %d failed, a majority of %d is needed", qe.Failed, qe.Nodes, qe.Need)
	case qe.Refused > qe.Nodes-qe.Need:
		fmt.Fprintf(&b, "held elsewhere (%d of %d nodes refused, and %d failed)", qe.Refused, qe.Nodes, qe.Failed)
	default:
		fmt.Fprintf(&b, "too few nodes reachable: %d of %d failed, and %d refused (held elsewhere on too few nodes to deny a majority by themselves); a majority of %d is needed",
			qe.Failed, qe.Nodes, qe.Refused, qe.Need)
	}
	for _, e := range qe.Errs {
		fmt.Fprintf(&b, "\n  node %s: %s", e.Node, describeNodeErr(e.Err, timeout))
	}
	return ns.scrub(b.String())
}

// invalidMessage strips the library's prefixes from an ErrInvalid error.
func invalidMessage(err error) string {
	msg := err.Error()
	msg = strings.TrimPrefix(msg, redlock.ErrInvalid.Error()+": ")
	return msg
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"

	"github.com/redlock-go/redlock"
)

// envTerm names the environment variable that gives COMMAND the leader's term.
const envTerm = "REDLOCK_TERM"

const electHelpText = `Usage: redlock elect [flags] NAME -- COMMAND [ARGS...]

Campaigns in the leader election NAME over the Redis nodes, waiting until this
process leads (or --wait ends), then runs COMMAND while leading: the election's
lock is renewed (every TTL/3) and the leader's value (--value) and term are
stored with it, so that "redlock status NAME" shows who leads. When COMMAND
exits, redlock resigns (the next candidate is elected at once) and exits with
COMMAND's status.

COMMAND gets the leader's term in REDLOCK_TERM (and REDLOCK_FENCE, the same
number): it is larger for every later leader of NAME, so that the resources
COMMAND writes to can refuse the writes of a deposed leader (docs/election.md).

If the leadership is lost while COMMAND runs (renewal refused, or no majority of
nodes renewed it before its validity ended), redlock says so on stderr and stops
COMMAND: SIGTERM, then SIGKILL if it is still running after --grace; it stops
COMMAND a tenth of the TTL before the lease could lapse. Signals are handled as
by redlock run.

Flags:
%s
Environment:
  REDLOCK_NODES            the node URLs, when --nodes is not given
%s  REDLOCK_TERM             set for COMMAND: the leader's term (a decimal number >= 1)
  REDLOCK_FENCE            set for COMMAND: the same number, as redlock run sets it

Exit status:
  N     COMMAND's exit status; 128+N if signal N killed it
  1     the leadership was lost while COMMAND ran and COMMAND exited 0
  2     usage error: the command line does not parse
  69    not elected because of failed nodes; COMMAND did not run
  75    not elected within --wait: another candidate leads; COMMAND did not run
  78    bad configuration: node URLs, credential or TLS files, option values,
        too few fence counters to give a term (nodes restarted without
        persistence: docs/election.md)
  126   COMMAND could not be started
  127   COMMAND not found
  128+N redlock got signal N while campaigning

Examples:
  export REDLOCK_NODES=redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379
  redlock elect scheduler -- ./scheduler --term-from-env
  redlock elect --value "$(hostname):8080" --ttl 5s primary -- ./serve
  redlock status primary    # who leads
`

func electCmd(args []string, stdout, stderr io.Writer) int {
	var o runOptions
	flags := newFlagSet("elect", stderr)
	o.register(flags, "how long to campaign before giving up (0: until elected)",
		"time between SIGTERM and SIGKILL when the leadership is lost (0: SIGKILL at once)",
		"a node up less than `D` (or that restarted within D) grants no lock, as node.WithRestartQuarantine(D) (0: off)",
		"`PREFIX` of the election's keys")
	host, _ := os.Hostname()
	value := flags.String("value", fmt.Sprintf("%s pid %d", host, os.Getpid()), "the leader's `VALUE`, shown by redlock status")
	help := fmt.Sprintf(electHelpText, flagHelp(flags), connEnvHelp)

	name, argv, code, ok := parseNamed(flags, "elect", args, help, stdout, stderr)
	if !ok {
		return code
	}
	r, code := o.prepare("elect", flags, name, argv, stdout, stderr, true, func() error {
		if len(*value) > redlock.MaxMetadataLen {
			return fmt.Errorf("--value of %d bytes exceeds %d", len(*value), redlock.MaxMetadataLen)
		}
		return nil
	})
	if r == nil {
		return code
	}
	defer r.client.Close()
	return r.runLeading(*value)
}

// runLeading campaigns, runs COMMAND while leading, and resigns.
func (r *runner) runLeading(value string) int {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	ld, code := r.campaign(sigs, value)
	if ld == nil {
		return code
	}
	term := strconv.FormatUint(ld.Term(), 10)
	foreground, code := r.start(envTerm+"="+term, envFence+"="+term)
	if code != 0 {
		r.resign(ld)
		return code
	}
	status, lost := r.supervise(func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			return nil
		case <-ld.Done():
		}
		if ctx.Err() != nil {
			return nil
		}
		r.mu.Lock()
		last := r.lastRenewal
		r.mu.Unlock()
		cause := context.Cause(ld.Context())
		var qe *redlock.QuorumError
		if errors.As(cause, &qe) && qe.Op == "extend" {
			last = nil // refused: known lost
		}
		return &lostError{cause: cause, last: last}
	}, sigs, !foreground)

	if err := r.resign(ld); err != nil && !lost {
		if errors.Is(err, redlock.ErrLockLost) {
			lost = true
			r.errorf("leadership of %q had lapsed on a majority of nodes when %s exited: it may not have led alone", r.name, r.cmd.Args[0])
		} else {
			r.errorf("warning: resignation from %q not confirmed by a majority (the lease lapses by itself within %v): %s", r.name, r.o.ttl, r.ns.scrub(err.Error()))
		}
	}
	if lost && status == 0 {
		return exitLost
	}
	return status
}

// campaign waits until this process leads (or --wait ends, or a signal
// comes). It returns nil and the exit status when it does not lead.
func (r *runner) campaign(sigs <-chan os.Signal, value string) (*redlock.Leadership, int) {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	if r.o.wait > 0 {
		var wcancel context.CancelFunc
		ctx, wcancel = context.WithTimeout(ctx, r.o.wait)
		defer wcancel()
	}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() { // a signal cuts the campaign short
		defer close(stopped)
		select {
		case s := <-sigs:
			cancel(&interrupted{s})
		case <-stop:
		}
	}()
	ld, err := r.client.Campaign(ctx, r.name, value)
	close(stop)
	<-stopped

	var intr *interrupted
	if errors.As(context.Cause(ctx), &intr) {
		if ld != nil {
			r.resign(ld)
		}
		r.errorf("campaign for %q interrupted by signal: %v", r.name, intr.sig)
		return nil, signalStatus(intr.sig)
	}
	if err == nil {
		return ld, 0
	}
	if errors.Is(err, redlock.ErrInvalid) {
		return nil, configError(r.stderr, "elect", "%s", r.ns.scrub(invalidMessage(err)))
	}
	var qe *redlock.QuorumError
	if errors.As(err, &qe) && qe.Op == "fence" && errors.Is(err, redlock.ErrLockLost) {
		r.errorf("not elected to %q: no term can be given: %s (docs/election.md, docs/fencing.md §6)", r.name, r.ns.scrub(err.Error()))
		return nil, exitConfig
	}
	code, reason := r.notAcquired(err)
	if r.o.wait > 0 {
		r.errorf("not elected to %q within %v: %s", r.name, r.o.wait, reason)
	} else {
		r.errorf("not elected to %q: %s", r.name, reason)
	}
	return nil, code
}

// resign steps down, bounded by twice the node timeout.
func (r *runner) resign(ld *redlock.Leadership) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*r.o.nodeTimeout)
	defer cancel()
	return ld.Resign(ctx)
}

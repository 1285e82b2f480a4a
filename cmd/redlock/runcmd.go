package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/clock"
	"github.com/redlock-go/redlock/node"
)

// Exit statuses of redlock run besides COMMAND's own (docs/cli.md#exit-status).
const (
	exitLost        = 1   // the lock was lost while COMMAND ran, and COMMAND exited 0
	exitUsage       = 2   // the command line does not parse (the flag package's status)
	exitUnavailable = 69  // EX_UNAVAILABLE: not acquired, because of failed nodes
	exitTempFail    = 75  // EX_TEMPFAIL: not acquired, held by another owner
	exitConfig      = 78  // EX_CONFIG: bad node URLs, credential or TLS files, option values
	exitCannotStart = 126 // COMMAND found but could not be started
	exitNotFound    = 127 // COMMAND not found
)

// minRunTTL is the shortest --ttl redlock run accepts: the lock must be
// acquired, and renewed every TTL/3, well within the TTL less its drift
// allowance; below this, a scheduling delay alone loses it.
const minRunTTL = 100 * time.Millisecond

// envFence names the environment variable that gives COMMAND its fencing token.
const envFence = "REDLOCK_FENCE"

const runHelpText = `Usage: redlock run [flags] NAME -- COMMAND [ARGS...]

Takes the lock NAME on a majority of the Redis nodes, runs COMMAND while renewing
the lock (every TTL/3), and releases it when COMMAND exits. redlock exits with
COMMAND's status.

COMMAND gets the lock's fencing token in REDLOCK_FENCE: a number that is larger
for every later holder of NAME, so that the resource COMMAND writes to can refuse
the writes of a holder whose lock ran out (see docs/fencing.md).

If the lock is lost while COMMAND runs (renewal refused, or no majority of nodes
renewed it before its validity ended), redlock says so on stderr and stops
COMMAND: SIGTERM, then SIGKILL if it is still running after --grace. COMMAND runs
in a process group of its own, which gets the signals, unless redlock runs in the
foreground of a terminal (then COMMAND can read the terminal). SIGINT, SIGTERM,
SIGHUP and SIGQUIT received by redlock are passed on to COMMAND.

If the lock is not acquired within --wait (0: a single attempt), COMMAND is not
run: redlock says why on stderr and exits with 75 (EX_TEMPFAIL) when another
owner holds the lock, or 69 (EX_UNAVAILABLE) when nodes failed; with --wait,
the last attempt decides.

Flags:
%s
Environment:
  REDLOCK_NODES            the node URLs, when --nodes is not given
%s  REDLOCK_FENCE            set for COMMAND: the lock's fencing token (a decimal number >= 1)

COMMAND gets redlock's environment without REDLOCK_PASSWORD and
REDLOCK_PASSWORD_FILE, and with REDLOCK_NODES stripped of user names and passwords.

Exit status:
  N     COMMAND's exit status; 128+N if signal N killed it
  1     the lock was lost while COMMAND ran (or had expired when it was released)
        and COMMAND exited 0; otherwise COMMAND's non-zero status
  2     usage error: the command line does not parse (unknown flag, a value that
        is not a duration, missing NAME or COMMAND)
  69    not acquired because of failed nodes: unreachable, refusing the password,
        timing out; COMMAND did not run
  75    not acquired: held by another owner (the nodes that refused it alone
        leave no majority); COMMAND did not run
  78    bad configuration: node URLs (an empty --nodes too), credential or TLS
        files, option values out of range, a TTL too short
  126   COMMAND could not be started
  127   COMMAND not found
  128+N redlock got signal N while waiting for the lock

Examples:
  export REDLOCK_NODES=redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379
  redlock run nightly-report -- ./report.sh --date today
  redlock run --wait 5m --ttl 30s db-migrate -- make migrate
  redlock run --nodes redis://localhost:6379 job -- sh -c 'echo "fencing token $REDLOCK_FENCE"'
  redlock run cron-job -- ./job.sh || [ $? -eq 75 ]   # skipping a run is fine
`

type runOptions struct {
	nodes       string
	prefix      string
	ttl         time.Duration
	wait        time.Duration
	grace       time.Duration
	nodeTimeout time.Duration
	quarantine  time.Duration // --restart-quarantine: node.WithRestartQuarantine; 0 off
	conn        connFlags
}

// lockedWriter serialises the writes of COMMAND's output copiers and redlock's
// own messages to a writer that is not a file.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (lw lockedWriter) Write(p []byte) (int, error) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.w.Write(p)
}

// childWriters returns the writers for COMMAND and redlock: files are passed to
// COMMAND as they are; other writers are shared under a mutex.
func childWriters(stdout, stderr io.Writer) (io.Writer, io.Writer) {
	_, f1 := stdout.(*os.File)
	_, f2 := stderr.(*os.File)
	if f1 && f2 {
		return stdout, stderr
	}
	mu := &sync.Mutex{}
	return lockedWriter{mu, stdout}, lockedWriter{mu, stderr}
}

// interrupted is the cause of an acquisition cut short by a signal.
type interrupted struct{ sig os.Signal }

func (e *interrupted) Error() string { return "interrupted by " + e.sig.String() }

func runCmd(args []string, stdout, stderr io.Writer) int {
	var o runOptions
	flags := newFlagSet("run", stderr)
	o.register(flags, "how long to wait for the lock (0: one attempt)",
		"time between SIGTERM and SIGKILL when the lock is lost (0: SIGKILL at once)",
		"a node up less than `D` (or that restarted within D) grants no lock, as node.WithRestartQuarantine(D): set D ≥ the longest TTL when nodes run without persistence (0: off)",
		"`PREFIX` of the lock's keys")
	help := fmt.Sprintf(runHelpText, flagHelp(flags), connEnvHelp)

	name, argv, code, ok := parseNamed(flags, "run", args, help, stdout, stderr)
	if !ok {
		return code
	}
	r, code := o.prepare("run", flags, name, argv, stdout, stderr, false, nil)
	if r == nil {
		return code
	}
	defer r.client.Close()
	return r.run()
}

// register registers the flags redlock run and redlock elect share; the
// help texts say what --wait, --grace, --restart-quarantine and --key-prefix
// mean to each.
func (o *runOptions) register(flags *flag.FlagSet, waitHelp, graceHelp, quarantineHelp, prefixHelp string) {
	flags.StringVar(&o.nodes, "nodes", "", "comma-separated node `URLS` (default $"+envNodes+")")
	durationVar(flags, &o.ttl, "ttl", redlock.DefaultTTL, "lease asked of each node; renewed every TTL/3 (at least "+minRunTTL.String()+")")
	durationVar(flags, &o.wait, "wait", 0, waitHelp)
	durationVar(flags, &o.grace, "grace", 10*time.Second, graceHelp)
	durationVar(flags, &o.nodeTimeout, "node-timeout", redlock.DefaultNodeTimeout, "bound on each call to one node")
	durationVar(flags, &o.quarantine, "restart-quarantine", 0, quarantineHelp)
	flags.StringVar(&o.prefix, "key-prefix", redlock.DefaultKeyPrefix, prefixHelp)
	o.conn.register(flags)
}

// prepare is what redlock run and redlock elect (verb) do between parsing the
// command line and taking the lock: it checks the options (and check, when
// given), dials the client with the runner's hooks, and finds COMMAND. It
// returns the runner, whose client the caller closes, or nil and the exit
// status, having said why on stderr.
func (o runOptions) prepare(verb string, flags *flag.FlagSet, name string, argv []string, stdout, stderr io.Writer, elect bool, check func() error) (*runner, int) {
	if len(argv) == 0 {
		return nil, usageError(stderr, verb, "missing COMMAND: redlock %s [flags] %s -- COMMAND [ARGS...]", verb, name)
	}
	for _, c := range []struct {
		name      string
		d         time.Duration
		allowZero bool
	}{{"ttl", o.ttl, false}, {"wait", o.wait, true}, {"grace", o.grace, true}, {"node-timeout", o.nodeTimeout, false}, {"restart-quarantine", o.quarantine, true}} {
		if err := checkDuration(c.name, c.d, c.allowZero); err != nil {
			return nil, configError(stderr, verb, "%v", err)
		}
	}
	if check != nil {
		if err := check(); err != nil {
			return nil, configError(stderr, verb, "%v", err)
		}
	}
	ns, err := parseNodes(o.nodes, flagGiven(flags, "nodes"))
	if err == nil {
		err = o.conn.apply(ns)
	}
	if err != nil {
		return nil, configError(stderr, verb, "%v", err)
	}

	r := &runner{o: o, name: name, ns: ns, answers: newAnswers(ns.names), elect: elect}
	nodeOpts := ns.nodeOptions()
	if o.quarantine > 0 {
		nodeOpts = append(nodeOpts, node.WithRestartQuarantine(o.quarantine))
	}
	client, err := redlock.Dial(ns.urls, redlock.WithTTL(o.ttl), redlock.WithNodeTimeout(o.nodeTimeout),
		redlock.WithKeyPrefix(o.prefix), redlock.WithNodeOptions(nodeOpts...),
		redlock.WithHooks(redlock.Hooks{OnAttempt: r.answers.attempted, OnNodeReply: r.answers.replied,
			OnRenewalFailure: r.renewalFailed, OnExtend: r.extended}))
	if err != nil { // it does not connect: only bad input fails it
		return nil, configError(stderr, verb, "%s", ns.scrub(invalidMessage(err)))
	}
	// The library refuses a TTL within its drift allowance (above); a lock
	// that must be renewed while COMMAND runs needs more.
	if o.ttl < minRunTTL {
		client.Close()
		return nil, configError(stderr, verb, "--ttl %v: too short: redlock %s must take the lock and renew it (every TTL/3) "+
			"well within the TTL less its drift allowance (%v); give at least %v", o.ttl, verb, clock.Drift(o.ttl, clock.DefaultDriftFactor), minRunTTL)
	}

	// A command that cannot be found is reported before the lock is taken.
	cmd := exec.Command(argv[0], argv[1:]...)
	notFound := errors.Is(cmd.Err, exec.ErrNotFound)
	if cmd.Err == nil && strings.ContainsRune(argv[0], os.PathSeparator) {
		_, err := os.Stat(argv[0])
		notFound = errors.Is(err, fs.ErrNotExist)
	}
	switch {
	case notFound:
		client.Close()
		fmt.Fprintf(stderr, "redlock: %s: command not found\n", argv[0])
		return nil, exitNotFound
	case cmd.Err != nil:
		client.Close()
		fmt.Fprintf(stderr, "redlock: %s: %v\n", argv[0], cmd.Err)
		return nil, exitCannotStart
	}
	r.client, r.cmd = client, cmd
	r.stdout, r.stderr = childWriters(stdout, stderr)
	return r, 0
}

// runner is one redlock run.
type runner struct {
	o      runOptions
	name   string
	ns     *nodeSet
	client *redlock.Client
	cmd    *exec.Cmd
	stdout io.Writer
	stderr io.Writer

	answers *answers // the nodes' answers to the acquisition attempts

	mu          sync.Mutex
	lastRenewal error // the last failed renewal since the last good one

	elect bool // redlock elect (elect.go): the lock is a leadership
}

// subject names what is held in messages: the lock, or the leadership.
func (r *runner) subject() string {
	if r.elect {
		return fmt.Sprintf("leadership of %q", r.name)
	}
	return fmt.Sprintf("lock %q", r.name)
}

func (r *runner) errorf(format string, args ...any) {
	fmt.Fprintf(r.stderr, "redlock: %s\n", r.ns.scrub(fmt.Sprintf(format, args...)))
}

func (r *runner) run() int {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	l, code := r.acquire(sigs)
	if l == nil {
		return code
	}
	tok, err := l.Fence(context.Background()) // obtained by the acquisition (WithFence): cached
	if err != nil {
		r.release(l)
		code, reason := r.notAcquired(err)
		r.errorf("lock %q acquired, but no fencing token: %s", r.name, reason)
		return code
	}

	foreground, code := r.start(envFence + "=" + strconv.FormatUint(tok, 10))
	if code != 0 {
		r.release(l)
		return code
	}
	status, lost := r.supervise(func(ctx context.Context) error { return r.keep(ctx, l) }, sigs, !foreground)

	if relErr := r.release(l); relErr != nil && !lost {
		if errors.Is(relErr, redlock.ErrLockLost) {
			lost = true
			r.errorf("lock %q had expired on a majority of nodes when %s exited: it may not have run alone", r.name, r.cmd.Args[0])
		} else {
			var qe *redlock.QuorumError
			msg := relErr.Error()
			if errors.As(relErr, &qe) {
				msg = r.ns.describeQuorum(qe, r.o.nodeTimeout)
			}
			r.errorf("warning: release of lock %q not confirmed by a majority (it expires by itself within %v): %s", r.name, r.o.ttl, msg)
		}
	}
	if lost && status == 0 {
		return exitLost
	}
	return status
}

// start starts COMMAND with redlock's environment (no secrets) and env. It
// returns whether COMMAND runs in the terminal's foreground, or the exit
// status when it could not be started.
func (r *runner) start(env ...string) (foreground bool, code int) {
	foreground = inForeground(os.Stdin)
	r.cmd.SysProcAttr = childAttr(!foreground)
	r.cmd.Stdin = os.Stdin
	r.cmd.Stdout = r.stdout
	r.cmd.Stderr = r.stderr
	r.cmd.Env = append(childEnv(os.Environ()), env...) // no secrets
	// When the output goes through pipes (not files), do not wait forever for
	// processes that COMMAND left behind and that hold them open.
	r.cmd.WaitDelay = time.Second
	if err := r.cmd.Start(); err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, exec.ErrNotFound) {
			r.errorf("%s: command not found", r.cmd.Args[0])
			return foreground, exitNotFound
		}
		r.errorf("%s: %v", r.cmd.Args[0], unwrapExec(err))
		return foreground, exitCannotStart
	}
	return foreground, 0
}

// acquire takes the lock, with its fencing token. It returns nil and the exit
// status when it cannot.
func (r *runner) acquire(sigs <-chan os.Signal) (*redlock.Lock, int) {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() { // a signal cuts the wait short
		defer close(stopped)
		select {
		case s := <-sigs:
			cancel(&interrupted{s})
		case <-stop:
		}
	}()
	var l *redlock.Lock
	var err error
	if r.o.wait > 0 {
		wctx, wcancel := context.WithTimeout(ctx, r.o.wait)
		l, err = r.client.Lock(wctx, r.name, redlock.WithFence())
		wcancel()
	} else {
		l, err = r.client.TryLock(ctx, r.name, redlock.WithFence())
	}
	close(stop)
	<-stopped

	var intr *interrupted
	if errors.As(context.Cause(ctx), &intr) {
		if l != nil {
			r.release(l)
		}
		r.errorf("waiting for lock %q interrupted by signal: %v", r.name, intr.sig)
		return nil, signalStatus(intr.sig)
	}
	if err == nil {
		return l, 0
	}
	if errors.Is(err, redlock.ErrInvalid) {
		return nil, configError(r.stderr, "run", "%s", r.ns.scrub(invalidMessage(err)))
	}
	within := "in one attempt (--wait 0)"
	if r.o.wait > 0 {
		within = "within " + r.o.wait.String()
	}
	code, reason := r.notAcquired(err)
	r.errorf("lock %q not acquired %s: %s", r.name, within, reason)
	return nil, code
}

// notAcquired returns the exit status and the explanation of a failed
// acquisition (or fencing-token write-back). The status is 75 when the nodes
// that refused (the lock is held there by another owner) alone make a
// majority impossible, and 69 otherwise: nodes that failed (unreachable,
// refusing the password, timed out) made it impossible, alone or together
// with fewer refusals. The last attempt decides, with all its answers: an
// attempt ends as soon as its outcome is known (or when --wait ends), and
// when the answers still to come could make it 75, they are waited for (up to
// the node timeout) — a node that is down answers at once, the second node
// that holds the lock a moment later.
func (r *runner) notAcquired(err error) (int, string) {
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) {
		return exitUnavailable, r.ns.scrub(err.Error())
	}
	if qe.Op == "acquire" && r.answers != nil {
		n, need := qe.Nodes, qe.Need
		pending := n - qe.Agreed - qe.Refused - qe.Failed
		if qe.Refused <= n-need && qe.Refused+pending > n-need {
			if full, ok := r.lastAttempt(qe); ok {
				qe = full
			}
		}
	}
	return notAcquiredStatus(qe.Nodes, qe.Need, qe.Refused, qe.Errs), r.ns.describeQuorum(qe, r.o.nodeTimeout)
}

// lastAttempt returns the outcome of the last acquisition attempt with every
// node's answer, waiting for the nodes that have not answered yet (a node
// call ends within the node timeout); a node that still has not is counted
// as failed. ok is false when no attempt was made.
func (r *runner) lastAttempt(qe *redlock.QuorumError) (*redlock.QuorumError, bool) {
	last, answered, ok := r.answers.lastAttempt(r.o.nodeTimeout + 50*time.Millisecond)
	if !ok {
		return nil, false
	}
	full := &redlock.QuorumError{Op: qe.Op, Resource: qe.Resource, Kind: qe.Kind, Need: qe.Need, Nodes: qe.Nodes}
	for i, a := range last {
		switch {
		case !answered[i]:
			full.Failed++
			full.Errs = append(full.Errs, &redlock.NodeError{Node: r.ns.names[i], Err: context.DeadlineExceeded})
		case a.ok:
			full.Agreed++
		case a.err != nil:
			full.Failed++
			full.Errs = append(full.Errs, &redlock.NodeError{Node: r.ns.names[i], Err: a.err})
		default:
			full.Refused++
		}
	}
	if full.Agreed >= full.Need {
		return nil, false // agreed too late, or a mix of attempts: the outcome as decided stands
	}
	return full, true
}

// notAcquiredStatus is the exit status of an acquisition refused by refused of
// n nodes, need of which had to agree, with the node errors errs: 78 when a
// node is the same Redis instance as another (the node list is wrong), 75
// when the refusals alone leave fewer than need nodes that could agree, 69
// otherwise.
func notAcquiredStatus(n, need, refused int, errs []*redlock.NodeError) int {
	for _, e := range errs {
		if errors.Is(e.Err, node.ErrSameInstance) {
			return exitConfig
		}
	}
	if refused > n-need {
		return exitTempFail
	}
	return exitUnavailable
}

// supervise waits for COMMAND while keeping the lock (keep: until its
// context ends, or the lock is lost: the error), passes signals on, and
// stops COMMAND if the lock is lost. It returns COMMAND's exit status and
// whether the lock was lost.
func (r *runner) supervise(keep func(context.Context) error, sigs <-chan os.Signal, group bool) (status int, lost bool) {
	p := r.cmd.Process
	exited := make(chan error, 1)
	go func() { exited <- r.cmd.Wait() }()

	kctx, kcancel := context.WithCancel(context.Background())
	lostc := make(chan error, 1)
	kept := make(chan struct{})
	go func() {
		defer close(kept)
		if err := keep(kctx); err != nil {
			lostc <- err
		}
	}()

	var kill <-chan time.Time
	var killTimer *time.Timer
	var waitErr error
wait:
	for {
		select {
		case waitErr = <-exited:
			break wait
		case s := <-sigs:
			if !group && fromTerminal(s) {
				continue // COMMAND, in the terminal's foreground group, got it too
			}
			_ = signalChild(p, group, s)
		case err := <-lostc:
			lost = true
			if r.o.grace > 0 {
				r.errorf("%s lost, stopping %s (SIGTERM, then SIGKILL after %v): %s", r.subject(), r.cmd.Args[0], r.o.grace, r.lostReason(err))
				_ = signalChild(p, group, syscall.SIGTERM)
				killTimer = time.NewTimer(r.o.grace)
				kill = killTimer.C
			} else {
				r.errorf("%s lost, killing %s (SIGKILL): %s", r.subject(), r.cmd.Args[0], r.lostReason(err))
				_ = signalChild(p, group, os.Kill)
			}
		case <-kill:
			r.errorf("%s still running %v after SIGTERM: sending SIGKILL", r.cmd.Args[0], r.o.grace)
			_ = signalChild(p, group, os.Kill)
			kill = nil
		}
	}
	if killTimer != nil {
		killTimer.Stop()
	}
	kcancel()
	<-kept
	if !lost {
		select {
		case err := <-lostc: // lost just as COMMAND exited
			lost = true
			r.errorf("%s lost: %s", r.subject(), r.lostReason(err))
		default:
		}
	}
	if r.cmd.ProcessState == nil {
		r.errorf("%s: %v", r.cmd.Args[0], waitErr)
		return 1, lost
	}
	return exitStatus(r.cmd.ProcessState), lost
}

// lostError is a lock lost while COMMAND ran.
type lostError struct {
	cause error // the renewal's refusal, or the end of the lock's validity
	last  error // the last failed renewal, if any
}

func (e *lostError) Error() string { return e.cause.Error() }

func (r *runner) lostReason(err error) string {
	var le *lostError
	if !errors.As(err, &le) {
		return r.ns.scrub(err.Error())
	}
	var qe *redlock.QuorumError
	if errors.As(le.cause, &qe) && qe.Op == "extend" && qe.Refused > 0 {
		return fmt.Sprintf("renewal refused by %d of %d nodes (it expired or was taken over)", qe.Refused, qe.Nodes)
	}
	msg := "its validity ran out before a renewal reached a majority of nodes"
	if le.last != nil {
		last := le.last.Error()
		if errors.As(le.last, &qe) {
			last = r.ns.describeQuorum(qe, r.o.nodeTimeout)
		}
		msg += "; last renewal: " + last
	}
	return r.ns.scrub(msg)
}

// keep renews the lock (every TTL/3, with the library's Lock.Keep) until ctx
// ends (it returns nil) or the lock is lost (it returns a *lostError). The lock
// counts as lost a tenth of the TTL before its validity ends, to leave COMMAND
// time to stop. There is no limit on the hold time: COMMAND runs as long as the
// lock is kept.
func (r *runner) keep(ctx context.Context, l *redlock.Lock) error {
	const forever = 100 * 365 * 24 * time.Hour
	kctx, stop := l.Keep(ctx, redlock.WithMaxHold(forever))
	defer stop()
	<-kctx.Done()
	if ctx.Err() != nil {
		return nil
	}
	cause := context.Cause(kctx)
	r.mu.Lock()
	last := r.lastRenewal
	r.mu.Unlock()
	var qe *redlock.QuorumError
	if errors.As(cause, &qe) && qe.Op == "extend" {
		return &lostError{cause: cause} // refused: known lost
	}
	return &lostError{cause: cause, last: last}
}

// extended ends a streak of failed renewals.
func (r *runner) extended(e redlock.ExtendEvent) {
	if e.OK {
		r.mu.Lock()
		r.lastRenewal = nil
		r.mu.Unlock()
	}
}

// renewalFailed warns, once per streak of failures, that renewal is failing
// and is being retried.
func (r *runner) renewalFailed(e redlock.RenewalFailureEvent) {
	if errors.Is(e.Err, redlock.ErrLockLost) {
		return // reported as the loss itself
	}
	r.mu.Lock()
	first := r.lastRenewal == nil
	r.lastRenewal = e.Err
	r.mu.Unlock()
	if first {
		msg := e.Err.Error()
		var qe *redlock.QuorumError
		if errors.As(e.Err, &qe) {
			msg = r.ns.describeQuorum(qe, r.o.nodeTimeout)
		}
		r.errorf("warning: renewal of lock %q failed, retrying until its validity runs out: %s", r.name, msg)
	}
}

// release releases the lock, bounded by twice the node timeout.
func (r *runner) release(l *redlock.Lock) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*r.o.nodeTimeout)
	defer cancel()
	return l.Release(ctx)
}

// unwrapExec drops the "fork/exec PATH: " prefix that repeats the command.
func unwrapExec(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

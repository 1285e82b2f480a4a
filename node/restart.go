package node

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
)

// ErrQuarantined is the error (reachable with errors.Is) of an acquisition
// (any call that runs a script that can grant a lock: Script.Grants) refused by
// the client because the node restarted less than the quarantine ago (see
// WithRestartQuarantine). No request was sent to the node.
var ErrQuarantined = errors.New("node: quarantined after a restart")

// MaxRestartQuarantine is the longest quarantine WithRestartQuarantine accepts
// (the library's longest TTL).
const MaxRestartQuarantine = 24 * time.Hour

// QuarantineError is the error Acquire returns while a node is quarantined. It
// wraps ErrQuarantined.
type QuarantineError struct {
	// RunID is the node's current run id (INFO server: run_id).
	RunID string
	// PrevRunID is the run id seen before, when the node was seen to change it; it
	// is empty when the quarantine comes from the uptime alone (for example on the
	// first connection to a node that started recently).
	PrevRunID string
	// Uptime is the node's uptime_in_seconds when the restart was detected.
	Uptime time.Duration
	// Until is when the node counts again, on this process' clock (it carries a
	// monotonic reading).
	Until time.Time
	// Quarantine is the configured duration (WithRestartQuarantine).
	Quarantine time.Duration
}

func (e *QuarantineError) Error() string {
	why := fmt.Sprintf("it has been up only %v, less than the %v quarantine", e.Uptime, e.Quarantine)
	switch {
	case e.RunID == "" && e.PrevRunID == "":
		why = fmt.Sprintf("it was reported restarted (RestartGuard.Restarted) within the %v quarantine", e.Quarantine)
	case e.PrevRunID != "":
		why = fmt.Sprintf("it restarted (run id %.8s… replaced by %.8s…, up %v) within the %v quarantine",
			e.PrevRunID, e.RunID, e.Uptime, e.Quarantine)
	}
	return fmt.Sprintf("%v: %s; it may have lost lock keys, so it grants no lock until %s (in %v)",
		ErrQuarantined, why, e.Until.Format("15:04:05.000"), time.Until(e.Until).Round(time.Millisecond))
}

// Unwrap returns ErrQuarantined.
func (e *QuarantineError) Unwrap() error { return ErrQuarantined }

// WithRestartQuarantine makes a node that restarted recently refuse to take part in
// acquisitions until d has passed since its restart: the "delayed restart" of the
// Redlock algorithm, enforced by the client. Set d to at least the longest TTL any
// client uses on these nodes (redlock.DefaultTTL is 10s); it must be in (0,
// MaxRestartQuarantine]. The option is off by default.
//
// Why: a node that restarts without persistence (or with a persistence mode that
// loses the last writes) has forgotten the lock keys it held, so it could grant a
// lock that a client still counts on as part of its majority. Every lease that
// relied on the lost keys has ended once the longest TTL has passed since the
// restart.
//
// How: every new connection to the node, right after it is dialed, runs INFO
// server and reads run_id and uptime_in_seconds. Redis counts the uptime in whole
// seconds of its wall clock, so it may overstate the time since the start by up to
// a second; the node is taken to have been up max(0, uptime − 1s). If that is less
// than d, the node is quarantined until d minus it from now; if the run_id changed
// since the last connection (another process behind the address: a restart, a
// Sentinel failover), for d from now whatever its uptime. A quarantine is only
// ever extended, never shortened. See RestartGuard. A
// restart closes every open connection, so the first call after it dials and sees
// the new process before anything reaches it. While quarantined, every call that could grant a lock
// (Acquire, AcquireFair: the scripts whose
// Script.Grants is true) returns a *QuarantineError (errors.Is ErrQuarantined)
// without sending the script, which the
// lock client counts as a failed vote; Release, Extend and WriteFence work as
// usual, so holders can still clean up. A node that started less than d before the
// client first connects is quarantined too: the client cannot know what it held.
//
// The check costs one round trip per new connection (one INFO server serves it
// and WithInstances' check alike); per call, only a read of the current
// quarantine. It applies to nodes made by Dial: FromPool refuses it, as the pool
// dials (give such a node WithRestartGuard, and feed the guard yourself).
// It relies on the node's wall clock for the uptime, so a forward clock step on
// the node (itself a safety violation) shortens it. If INFO fails or lacks those
// fields, the new connection is refused with the error (a failed vote, for every
// kind of call). docs/testing.md shows it at work (fault scenario
// restart-empty-delayed).
func WithRestartQuarantine(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d <= 0 || d > MaxRestartQuarantine {
			return fmt.Errorf("%w: restart quarantine %v must be in (0, %v]", ErrInvalidOption, d, MaxRestartQuarantine)
		}
		if c.guardSet {
			return fmt.Errorf("%w: WithRestartQuarantine and WithRestartGuard given together: give one", ErrInvalidOption)
		}
		c.quarantine, c.ownGuard = &RestartGuard{d: d}, true // one state per node: options are applied per Dial
		return nil
	})
}

// WithRestartGuard makes the node refuse every call that could grant a lock
// (the scripts whose Script.Grants is true) while g.Refusal() is not nil,
// with that error (a *QuarantineError, errors.Is ErrQuarantined), as
// WithRestartQuarantine does; Release, Extend and WriteFence work as usual.
// One guard serves one node. It is the seam for nodes that do not dial
// themselves: a node made by FromPool cannot see its pool's new connections,
// so whoever knows of restarts feeds g: Observe with the INFO server text of a
// new connection, or Restarted when a restart is known otherwise (an
// orchestrator's event, a simulation restarting an in-memory server). A node
// made by Dial also feeds g the INFO of every connection it dials, exactly as
// WithRestartQuarantine does. It cannot be combined with WithRestartQuarantine.
func WithRestartGuard(g *RestartGuard) Option {
	return optionFunc(func(c *config) error {
		if g == nil || g.d <= 0 {
			return fmt.Errorf("%w: WithRestartGuard needs a guard from NewRestartGuard", ErrInvalidOption)
		}
		if c.ownGuard {
			return fmt.Errorf("%w: WithRestartQuarantine and WithRestartGuard given together: give one", ErrInvalidOption)
		}
		c.quarantine, c.guardSet = g, true
		return nil
	})
}

// RestartGuard is the restart detector behind WithRestartQuarantine, exported so
// that nodes built on other Redis clients (see the adapter modules) apply the same
// rule: feed it the INFO server text of every new connection (Observe) and refuse
// acquisitions while Refusal returns an error. It is safe for concurrent use.
//
// Rule: a node that has been up less than d, or whose run_id changed since the
// last connection (a restart, or a Sentinel failover that put another process
// behind the same address: that process' uptime says nothing about which keys it
// has), grants no lock until d has passed. A quarantine is only ever extended.
type RestartGuard struct {
	d time.Duration

	mu    sync.Mutex
	runID string // last run id seen
	cur   atomic.Pointer[QuarantineError]
}

// NewRestartGuard returns a guard with quarantine d, in (0, MaxRestartQuarantine].
func NewRestartGuard(d time.Duration) (*RestartGuard, error) {
	if d <= 0 || d > MaxRestartQuarantine {
		return nil, fmt.Errorf("%w: restart quarantine %v must be in (0, %v]", ErrInvalidOption, d, MaxRestartQuarantine)
	}
	return &RestartGuard{d: d}, nil
}

// Quarantine returns the configured duration.
func (g *RestartGuard) Quarantine() time.Duration { return g.d }

// Observe reads run_id and uptime_in_seconds from the text of INFO server (or
// INFO) seen on a new connection, read at now, and starts or extends the
// quarantine accordingly. It fails, changing nothing, when the text lacks them.
func (g *RestartGuard) Observe(info string, now time.Time) error {
	runID, uptime, err := parseServerInfo(info)
	if err != nil {
		return err
	}
	g.observe(runID, uptime, now)
	return nil
}

func (g *RestartGuard) observe(runID string, uptime time.Duration, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	prev := g.runID
	g.runID = runID
	up := max(0, uptime-time.Second) // Redis rounds the uptime up to the second
	changed := prev != "" && prev != runID
	if up >= g.d && !changed {
		return
	}
	e := &QuarantineError{RunID: runID, Uptime: uptime, Until: now.Add(g.d - up), Quarantine: g.d}
	if changed {
		e.PrevRunID = prev
		e.Until = now.Add(g.d) // another process: its uptime does not bound what it lost
	}
	if old := g.cur.Load(); old == nil || e.Until.After(old.Until) {
		g.cur.Store(e)
	}
}

// Restarted starts a quarantine of the full duration from now, or extends the
// current one to that: for a restart the caller learnt of otherwise than by
// INFO (see WithRestartGuard). The *QuarantineError it leads to has no run ids
// and a zero Uptime.
func (g *RestartGuard) Restarted(now time.Time) {
	e := &QuarantineError{Until: now.Add(g.d), Quarantine: g.d}
	g.mu.Lock()
	defer g.mu.Unlock()
	if old := g.cur.Load(); old == nil || e.Until.After(old.Until) {
		g.cur.Store(e)
	}
}

// Refusal returns the current quarantine (a *QuarantineError), or nil when the
// node may take part in acquisitions.
func (g *RestartGuard) Refusal() error { return g.refusalAt(time.Now()) }

func (g *RestartGuard) refusalAt(now time.Time) error {
	if e := g.cur.Load(); e != nil && now.Before(e.Until) {
		return e
	}
	return nil
}

// quarantineDialed checks a freshly dialed connection against g, given the
// reply to the INFO server the dial ran (info, or infoErr). It returns the
// connection, wrapped when the node is quarantined so that acquisitions on it
// are refused, or an error (after closing c) when the check could not be made.
func quarantineDialed(g *RestartGuard, c redis.Conn, info string, infoErr error) (redis.Conn, error) {
	if infoErr != nil {
		c.Close()
		return nil, fmt.Errorf("node: restart check: INFO server: %w", infoErr)
	}
	now := time.Now()
	if err := g.Observe(info, now); err != nil {
		c.Close()
		return nil, err
	}
	if g.refusalAt(now) != nil {
		return &quarantinedConn{Conn: c, q: g}, nil
	}
	return c, nil // the common case: nothing to check per call
}

// parseServerInfo reads run_id and uptime_in_seconds from INFO server.
func parseServerInfo(info string) (runID string, uptime time.Duration, err error) {
	up := int64(-1)
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "run_id":
			runID = v
		case "uptime_in_seconds":
			if up, err = strconv.ParseInt(v, 10, 64); err != nil || up < 0 {
				return "", 0, fmt.Errorf("%w: restart check: uptime_in_seconds %q", ErrUnexpectedReply, v)
			}
		}
	}
	if runID == "" || up < 0 {
		return "", 0, fmt.Errorf("%w: restart check: INFO server lacks run_id or uptime_in_seconds", ErrUnexpectedReply)
	}
	if up > int64(MaxRestartQuarantine/time.Second)*2 {
		up = int64(MaxRestartQuarantine/time.Second) * 2 // far beyond any quarantine; avoids overflow
	}
	return runID, time.Duration(up) * time.Second, nil
}

// quarantinedConn is a connection dialed while its node was quarantined: it
// refuses every script that can grant a lock (grantScript) until the
// quarantine ends, and passes everything
// else through. Acquire checks the quarantine before it sends, but the dial that
// detects a restart may be the one made for that very call; the connection is
// what stops its SET. The pipelining mux asks the connection (check) before it
// queues a command, so a refusal fails that command only: the releases and
// extensions pipelined with it go through.
type quarantinedConn struct {
	redis.Conn
	q *RestartGuard
}

var (
	_ redis.ConnWithContext = (*quarantinedConn)(nil)
	_ redis.ConnWithTimeout = (*quarantinedConn)(nil)
)

func (c *quarantinedConn) check(cmd string, args []any) error {
	if grantScript(cmd, args) {
		return c.q.Refusal()
	}
	return nil
}

// Do implements redis.Conn.
func (c *quarantinedConn) Do(cmd string, args ...any) (any, error) {
	if err := c.check(cmd, args); err != nil {
		return nil, err
	}
	return c.Conn.Do(cmd, args...)
}

// Send implements redis.Conn.
func (c *quarantinedConn) Send(cmd string, args ...any) error {
	if err := c.check(cmd, args); err != nil {
		return err
	}
	return c.Conn.Send(cmd, args...)
}

// DoContext implements redis.ConnWithContext.
func (c *quarantinedConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	if err := c.check(cmd, args); err != nil {
		return nil, err
	}
	return redis.DoContext(c.Conn, ctx, cmd, args...)
}

// ReceiveContext implements redis.ConnWithContext.
func (c *quarantinedConn) ReceiveContext(ctx context.Context) (any, error) {
	return redis.ReceiveContext(c.Conn, ctx)
}

// DoWithTimeout implements redis.ConnWithTimeout.
func (c *quarantinedConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	if err := c.check(cmd, args); err != nil {
		return nil, err
	}
	return redis.DoWithTimeout(c.Conn, d, cmd, args...)
}

// setWait implements replyAwaiter when the connection it wraps does.
func (c *quarantinedConn) setWait(deadline time.Time) {
	if a, ok := c.Conn.(replyAwaiter); ok {
		a.setWait(deadline)
	}
}

// awaitReply implements replyAwaiter when the connection it wraps does.
func (c *quarantinedConn) awaitReply() bool {
	if a, ok := c.Conn.(replyAwaiter); ok {
		return a.awaitReply()
	}
	return true // the next read reports what there is (never reached: dialConn's connections are replyAwaiters)
}

// ReceiveWithTimeout implements redis.ConnWithTimeout.
func (c *quarantinedConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	return redis.ReceiveWithTimeout(c.Conn, d)
}

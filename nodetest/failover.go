package nodetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redlock-go/redlock/node"
)

// The two halves of an adapter's failover test (a Sentinel or Cluster
// failover whose new primary lost the lock key): the quarantine refuses the
// grant on every node, and a node without it grants the lock a second time
// (the control: the failover did lose the key). The goredis and rueidis
// modules' tests share them.

// AwaitQuarantined has each of nodes, in turn, try to take the lock key
// "{"+res+"}" (fence counter "{"+res+"}:fence", TTL one minute) for token
// until that node refuses it with a *node.QuarantineError, and returns
// those refusals in order, each logged. A grant fails the test: the
// quarantine let a node that lost the key grant it. So does a node that
// answers otherwise for 10 s after since (the failover): until then an
// error is retried every 50 ms (the client may still reach the old
// primary, which holds the key or says READONLY). An attempt that failed
// is released with its token, as a lock client undoes a failed attempt:
// its grant may have landed before the quarantine saw the failover.
func AwaitQuarantined(t *testing.T, since time.Time, res, token string, nodes ...node.Node) []*node.QuarantineError {
	t.Helper()
	var refusals []*node.QuarantineError
	for _, n := range nodes {
		for {
			a, err := tryAcquire(n, res, token)
			if a.OK {
				t.Fatalf("%s granted %q %v after the failover", n.Name(), res, time.Since(since))
			}
			var qe *node.QuarantineError
			if errors.As(err, &qe) {
				t.Logf("%s: %v", n.Name(), err)
				refusals = append(refusals, qe)
				break
			}
			if time.Since(since) >= 10*time.Second {
				t.Fatalf("%s: no quarantine seen 10 s after the failover: %v", n.Name(), err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return refusals
}

// AwaitControlGrant checks that control, a node without the quarantine,
// grants the lock key "{"+res+"}" after the failover within 10 s, then
// releases it; it reports whether it did, logging its last attempt if not
// (the caller adds what it knows of the servers, and fails). held reads
// the key on the new primary ("" when absent).
//
// First it undoes what the quarantined attempts of token may have left: a
// grant taken back by a release that a loaded machine lost keeps the key
// for its minute, as a lock client's round would undo it. And an attempt
// of the control whose reply was lost (its context ended) may have been
// granted all the same, the next then being refused (NX): the key holding
// the control's token counts as its grant. (CI runs b1 and f3 of
// 6 December 2026: the control refused for 10 s while the new primary held
// the key for the quarantined attempt.)
func AwaitControlGrant(t *testing.T, control node.Node, res, token string, held func() string) bool {
	t.Helper()
	const mine = "control"
	key := "{" + res + "}"
	if v := held(); v != "" {
		t.Logf("after the quarantined attempts the new primary holds the key (%s): undone", v)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := control.Release(ctx, key, token, false)
		cancel()
		if err != nil {
			t.Fatalf("undo the quarantined attempt's grant: %v", err)
		}
	}
	var last error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		a, err := tryAcquire(control, res, mine)
		if (err == nil && a.OK) || held() == mine {
			break
		}
		last = err
		if time.Now().After(deadline) {
			t.Errorf("the key was lost but the control node, without the quarantine, did not grant it in 10 s: last attempt ok=%t err=%v", a.OK, last)
			return false
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ok, err := control.Release(ctx, key, mine, false)
	if err != nil || !ok {
		t.Fatalf("release of the control's grant: ok=%t err=%v", ok, err)
	}
	return true
}

// tryAcquire is one acquisition of res's lock key for token, bounded by
// 2 s; an attempt that failed is released with its token.
func tryAcquire(n node.Node, res, token string) (node.Acquired, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	key := "{" + res + "}"
	a, err := n.Acquire(ctx, key, key+":fence", token, time.Minute)
	if err != nil {
		uctx, ucancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, _ = n.Release(uctx, key, token, false)
		ucancel()
	}
	return a, err
}

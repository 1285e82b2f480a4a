package redlock

// LocalWaiters returns the number of c's Lock calls on resource in c's own
// queue (the head, which makes the attempts, and those behind it): what a
// call waiting for its client's own lock is known by, since it makes no
// attempt meanwhile.
func LocalWaiters(c *Client, resource string) int {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	if q := c.queues[resource]; q != nil {
		return len(q.waiters)
	}
	return 0
}

// HeldSweepMin is heldSweepMin: how many resources a client's list of its
// locks holds before a new one makes it sweep.
const HeldSweepMin = heldSweepMin

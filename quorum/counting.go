package quorum

// Counting returns the smallest number q of nodes, out of n, that a permit of
// a counting semaphore with the given number of permits must hold when each
// node admits at most permits holders: permits+1 simultaneous holders would
// need (permits+1)·q grants, and the nodes hold at most permits·n, so at most
// permits hold at once if and only if (permits+1)·q > permits·n, that is
// q = ⌊permits·n/(permits+1)⌋ + 1. With one permit it is Majority(n); for
// permits ≥ 2 a majority is not enough (n = 5, permits = 2: three permits of
// 3 nodes each fit in 5 nodes of 2 holders each). It returns 0 when permits
// or n is below 1.
func Counting(permits, n int) int {
	if permits < 1 || n < 1 {
		return 0
	}
	return permits*n/(permits+1) + 1
}

// CountingTolerance returns how many of n nodes may fail while permits of a
// counting semaphore can still be granted: n − Counting(permits, n). It is 0
// (no fault tolerance: every node must answer) for n = 3 and permits ≥ 2, n = 5
// and permits ≥ 4, n = 7 and permits ≥ 6, and for every n once permits ≥ n−1.
func CountingTolerance(permits, n int) int {
	q := Counting(permits, n)
	if q == 0 {
		return 0
	}
	return n - q
}

package quorum

import "testing"

// TestCounting checks the counting quorum against its definition (the
// smallest q with (permits+1)·q > permits·n, by search) and against the table
// of docs/semaphore.md.
func TestCounting(t *testing.T) {
	for n := 1; n <= 15; n++ {
		for permits := 1; permits <= 100; permits++ {
			want := 0
			for q := 1; q <= n; q++ {
				if (permits+1)*q > permits*n {
					want = q
					break
				}
			}
			if got := Counting(permits, n); got != want {
				t.Fatalf("Counting(%d, %d) = %d, want %d", permits, n, got, want)
			}
			if permits == 1 && want != Majority(n) {
				t.Fatalf("Counting(1, %d) = %d, want the majority %d", n, want, Majority(n))
			}
			// q never exceeds n: with q = n, (permits+1)·n > permits·n.
			if want < 1 || want > n {
				t.Fatalf("Counting(%d, %d) = %d out of [1, n]", permits, n, want)
			}
		}
	}
	for _, c := range []struct{ permits, n, q, tolerance int }{
		{1, 5, 3, 2}, {2, 3, 3, 0}, {2, 5, 4, 1}, {3, 5, 4, 1}, {4, 5, 5, 0}, {8, 5, 5, 0},
		{2, 7, 5, 2}, {3, 7, 6, 1}, {4, 7, 6, 1}, {6, 7, 7, 0}, {8, 7, 7, 0}, {64, 7, 7, 0},
		{2, 9, 7, 2}, {8, 9, 9, 0},
	} {
		if q, tol := Counting(c.permits, c.n), CountingTolerance(c.permits, c.n); q != c.q || tol != c.tolerance {
			t.Errorf("permits %d, n %d: q %d tolerance %d, want %d and %d", c.permits, c.n, q, tol, c.q, c.tolerance)
		}
	}
	if Counting(0, 5) != 0 || Counting(2, 0) != 0 || CountingTolerance(0, 5) != 0 {
		t.Error("Counting of an empty semaphore or no nodes must be 0")
	}
}

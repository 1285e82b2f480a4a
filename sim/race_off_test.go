//go:build !race

package sim_test

// raceEnabled is true under -race, which makes the simulation several times
// slower: the largest batches are cut (see docs/simulation.md).
const raceEnabled = false

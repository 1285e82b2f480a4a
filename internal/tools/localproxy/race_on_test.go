//go:build race

package main

// raceEnabled is true when this test binary was built with -race.
const raceEnabled = true

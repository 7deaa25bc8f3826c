//go:build race

package clustertest_test

// ciRounds is the randomized run's length in CI: under -race the nodes
// are built with the race detector and run several times slower, so a
// shorter run - a part of the bag of kinds, different with each seed -
// keeps the race-enabled suite's cost in bounds; the run without -race
// deals every kind.
const ciRounds = 4

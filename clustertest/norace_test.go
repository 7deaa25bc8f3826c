//go:build !race

package clustertest_test

// ciRounds is the randomized run's length in CI: one of each kind of
// fault (the schedule deals them from a shuffled bag).
const ciRounds = 11

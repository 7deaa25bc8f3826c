//go:build !race

package clustertest

// raceEnabled is true when the test binary was built with -race: the
// cluster's processes are built with it too.
const raceEnabled = false

//go:build !linux

package index

// adviseRandom does nothing here; see advise_linux.go.
func adviseRandom([]byte) {}

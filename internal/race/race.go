//go:build race

// Package race reports whether the race detector is on, so that tests of
// allocation counts and of rates over time can stand aside: under -race,
// sync.Pool drops items at random and every pooled buffer may be a fresh
// allocation, and goroutines are slowed and stalled unevenly.
package race

// Enabled is true when the binary was built with -race.
const Enabled = true

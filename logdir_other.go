//go:build !linux && !darwin

package spool

// diskSpace is unknown on this platform: -1, -1 (Kafka's "unknown").
func diskSpace(string) (total, usable int64) { return -1, -1 }

//go:build !linux

package segment

// startWriteback does nothing where sync_file_range does not exist: the
// operating system writes dirty pages back on its own schedule.
func startWriteback(fd uintptr, off, n int64) error { return nil }

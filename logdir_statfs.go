//go:build linux || darwin

package spool

import "syscall"

// diskSpace is the size of the file system holding path and the bytes an
// unprivileged process may still write to it; -1, -1 if statfs fails.
func diskSpace(path string) (total, usable int64) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return -1, -1
	}
	return int64(st.Blocks) * int64(st.Bsize), int64(st.Bavail) * int64(st.Bsize)
}

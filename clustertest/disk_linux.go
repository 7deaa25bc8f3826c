package clustertest

import (
	"fmt"
	"syscall"
)

// mountTmpfs mounts a tmpfs of size bytes on dir.
func mountTmpfs(dir string, size int64) error {
	return syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size))
}

// resizeTmpfs gives the tmpfs on dir a new size; the kernel refuses a size
// below what it holds (EINVAL).
func resizeTmpfs(dir string, size int64) error {
	return syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_REMOUNT, fmt.Sprintf("size=%d", size))
}

// unmount removes the mount on dir, lazily if something still holds it.
func unmount(dir string) error {
	if err := syscall.Unmount(dir, 0); err != nil {
		return syscall.Unmount(dir, syscall.MNT_DETACH)
	}
	return nil
}

// diskUsage is the size of the file system holding dir, and its bytes in
// use.
func diskUsage(dir string) (size, used int64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, fmt.Errorf("clustertest: statfs %s: %w", dir, err)
	}
	return int64(st.Blocks) * st.Bsize, int64(st.Blocks-st.Bfree) * st.Bsize, nil
}

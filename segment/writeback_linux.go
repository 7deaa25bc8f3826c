package segment

import "syscall"

// syncFileRangeWrite is SYNC_FILE_RANGE_WRITE: start writing the range's
// dirty pages, without waiting for them.
const syncFileRangeWrite = 0x2

// startWriteback asks the kernel to begin writing [off, off+n) of fd's
// file to the disk (sync_file_range with SYNC_FILE_RANGE_WRITE alone): it
// waits for nothing and makes nothing durable by itself - metadata is not
// written, and only an fsync says the data is on stable storage.
func startWriteback(fd uintptr, off, n int64) error {
	return syscall.SyncFileRange(int(fd), off, n, syncFileRangeWrite)
}

package index

import "syscall"

// adviseRandom tells the kernel that a map is read at random (binary
// search), so that a fault reads only its page, not a readahead window.
// Without it, the first touch of a map reads ahead up to megabytes of the
// file - for the unwritten blocks of an untrimmed index, zero-filled pages
// nobody asked for. When indexes were preallocated whole (10 MiB) that cost
// tens of milliseconds an index after a crash, minutes for a broker with
// thousands of partitions; files that grow in steps leave less to read
// ahead, but a binary search still wants only its pages. Advice only: an
// error changes nothing but speed.
func adviseRandom(mm []byte) { _ = syscall.Madvise(mm, syscall.MADV_RANDOM) }

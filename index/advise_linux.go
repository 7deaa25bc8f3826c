package index

import "syscall"

// adviseRandom tells the kernel that a map is read at random (binary
// search), so that a fault reads only its page, not a readahead window.
// Without it, opening an index left at its full preallocated size by a
// crash costs far more than its entries: the first touch of the map reads
// ahead megabytes of the file, and for preallocated blocks the kernel
// zero-fills every page read - tens of milliseconds an index, which add up
// to minutes when a broker with thousands of partitions recovers. Advice
// only: an error changes nothing but speed.
func adviseRandom(mm []byte) { _ = syscall.Madvise(mm, syscall.MADV_RANDOM) }

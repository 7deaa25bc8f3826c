package index

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// On a real file system that fills (a tmpfs, mounted when the test may:
// it needs root), appends go on until the file must grow, and that one
// fails with ENOSPC - not SIGBUS on a page of the map past the end of the
// file - with the entries intact; once there is room it succeeds.
func TestRealFullDiskOnGrow(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tmpfs")
	require.NoError(t, os.Mkdir(dir, 0o755))
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("skipped: cannot mount a tmpfs for a real full disk (needs root): %v", err)
	}
	t.Cleanup(func() { require.NoError(t, syscall.Unmount(dir, syscall.MNT_DETACH)) })

	x, err := OpenOffset(nil, filepath.Join(dir, "i"), 0, 8<<20, true) // mapped past what the disk holds
	require.NoError(t, err)
	defer x.CloseNoTrim()
	require.NoError(t, x.Append(1, 1))

	// Fill the file system.
	ballast, err := os.Create(filepath.Join(dir, "ballast"))
	require.NoError(t, err)
	var st syscall.Statfs_t
	require.NoError(t, syscall.Statfs(dir, &st))
	require.NoError(t, syscall.Fallocate(int(ballast.Fd()), 0, 0, int64(st.Bavail)*st.Bsize))
	require.NoError(t, ballast.Close())

	var n int64 = 1
	for {
		err := x.Append(n+1, n+1)
		if err != nil {
			require.ErrorIs(t, err, syscall.ENOSPC)
			break
		}
		n++
	}
	require.Equal(t, int(n), x.Len())
	require.Equal(t, int64(n*OffsetEntrySize), x.Allocated(), "every allocated entry was used")
	e, ok, err := x.Lookup(1 << 30)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, OffsetEntry{n, n}, e)

	require.NoError(t, os.Remove(filepath.Join(dir, "ballast")))
	require.NoError(t, x.Append(n+1, n+1))
	require.Equal(t, int(n+1), x.Len())
}

package controller

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// On a real full disk (a tmpfs filled to the last block) a voter still
// records new terms: each Set spends a step of the reserve. Needs root to
// mount the tmpfs; skipped, saying why, otherwise.
func TestStableStoreRealFullDisk(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tmpfs")
	require.NoError(t, os.Mkdir(dir, 0o755))
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("skipped: cannot mount a tmpfs for a real full disk (needs root): %v", err)
	}
	t.Cleanup(func() { require.NoError(t, syscall.Unmount(dir, syscall.MNT_DETACH)) })
	path := filepath.Join(dir, QuorumStateFile)
	s := mustOpenStable(t, path)
	require.NoError(t, s.SetUint64([]byte("CurrentTerm"), 1))

	// Fill the disk: write until ENOSPC.
	f, err := os.Create(filepath.Join(dir, "ballast"))
	require.NoError(t, err)
	defer f.Close()
	page := make([]byte, 4096)
	for {
		if _, err := f.Write(page); err != nil {
			require.True(t, errors.Is(err, syscall.ENOSPC), "%v", err)
			break
		}
	}
	_, err = os.Create(filepath.Join(dir, "probe"))
	if err == nil {
		_, err = f.Write(page)
	}
	require.Error(t, err, "the disk is full")

	for term := uint64(2); term <= 5; term++ {
		require.NoError(t, s.SetUint64([]byte("CurrentTerm"), term), "term %d on a full disk", term)
	}
	u, err := mustOpenStable(t, path).GetUint64([]byte("CurrentTerm"))
	require.NoError(t, err)
	require.Equal(t, uint64(5), u)
}

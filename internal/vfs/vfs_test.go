package vfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAllocateGivesRealBlocks(t *testing.T) {
	dir := t.TempDir()
	f, err := Default.OpenFile(filepath.Join(dir, "a"), os.O_RDWR|os.O_CREATE, 0o644)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Allocate(0, 1<<20))
	st, err := f.Stat()
	require.NoError(t, err)
	require.Equal(t, int64(1<<20), st.Size())
}

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "cp")
	require.NoError(t, WriteFileAtomic(Default, p, []byte("one")))
	require.NoError(t, WriteFileAtomic(Default, p, []byte("two")))
	b, err := ReadFile(Default, p)
	require.NoError(t, err)
	require.Equal(t, "two", string(b))

	// A failed fsync of the temp file leaves the old contents in place.
	var sw Switch
	ffs := NewFaultFS(Default, sw.Inject)
	sw.FailAfter(OpSync, nil, 0, ErrIO, 1)
	require.ErrorIs(t, WriteFileAtomic(ffs, p, []byte("three")), ErrIO)
	b, err = ReadFile(Default, p)
	require.NoError(t, err)
	require.Equal(t, "two", string(b))
	_, err = os.Stat(p + ".tmp")
	require.True(t, os.IsNotExist(err))
}

func TestLockExcludes(t *testing.T) {
	dir := t.TempDir()
	l, err := Default.Lock(filepath.Join(dir, ".lock"))
	require.NoError(t, err)
	// flock locks belong to the open file description, so a second open in
	// the same process conflicts just as another process would.
	_, err = Default.Lock(filepath.Join(dir, ".lock"))
	require.ErrorIs(t, err, ErrLocked)
	require.NoError(t, l.Close())
	l, err = Default.Lock(filepath.Join(dir, ".lock"))
	require.NoError(t, err)
	require.NoError(t, l.Close())
}

func TestTornWrite(t *testing.T) {
	dir := t.TempDir()
	var sw Switch
	ffs := NewFaultFS(Default, sw.Inject)
	f, err := ffs.OpenFile(filepath.Join(dir, "x.log"), os.O_RDWR|os.O_CREATE, 0o644)
	require.NoError(t, err)
	defer f.Close()
	sw.TearWrite(func(p string) bool { return strings.HasSuffix(p, ".log") }, 3, ErrNoSpace, 1)
	n, err := f.WriteAt([]byte("abcdef"), 0)
	require.ErrorIs(t, err, ErrNoSpace)
	require.Equal(t, 3, n)
	n, err = f.WriteAt([]byte("ghi"), 3)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	b, err := ReadFile(Default, filepath.Join(dir, "x.log"))
	require.NoError(t, err)
	require.Equal(t, "abcghi", string(b))
	require.Equal(t, 2, sw.Count(OpWrite))
}

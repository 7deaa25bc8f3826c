package vfs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// countingFS counts the files open through it.
type countingFS struct {
	FS
	open atomic.Int64
	max  atomic.Int64
}

type countedFile struct {
	File
	fs     *countingFS
	closed atomic.Bool
}

func (c *countingFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := c.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	n := c.open.Add(1)
	for {
		m := c.max.Load()
		if n <= m || c.max.CompareAndSwap(m, n) {
			break
		}
	}
	return &countedFile{File: f, fs: c}, nil
}

func (f *countedFile) Close() error {
	if !f.closed.Swap(true) {
		f.fs.open.Add(-1)
	}
	return f.File.Close()
}

// poolFiles makes n files holding their own names and returns their paths.
func poolFiles(t *testing.T, n int) []string {
	dir := t.TempDir()
	paths := make([]string, n)
	for i := range paths {
		paths[i] = filepath.Join(dir, fmt.Sprintf("f%03d", i))
		require.NoError(t, os.WriteFile(paths[i], []byte(paths[i]), 0o644))
	}
	return paths
}

// readAll acquires h and checks that it reads want.
func readAll(h *Handle, want string) error {
	f, err := h.Acquire()
	if err != nil {
		return err
	}
	defer h.Release()
	buf := make([]byte, len(want))
	if _, err := f.ReadAt(buf, 0); err != nil {
		return err
	}
	if string(buf) != want {
		return fmt.Errorf("read %q, want %q", buf, want)
	}
	return nil
}

func TestFilePoolKeepsToItsLimit(t *testing.T) {
	paths := poolFiles(t, 20)
	cfs := &countingFS{FS: Default}
	p := NewFilePool(4)
	hs := make([]*Handle, len(paths))
	for i, path := range paths {
		h, err := NewHandle(p, cfs, path, os.O_RDONLY, nil, nil)
		require.NoError(t, err)
		hs[i] = h
	}
	require.Zero(t, cfs.open.Load(), "a handle opens its file on first use")
	for round := 0; round < 3; round++ {
		for i, h := range hs {
			require.NoError(t, readAll(h, paths[i]), "round %d: reopened after eviction", round)
			require.LessOrEqual(t, cfs.open.Load(), int64(4))
			require.Equal(t, cfs.open.Load(), p.Stats().Open)
		}
	}
	st := p.Stats()
	require.Greater(t, st.Opens, int64(40), "20 files round robin through 4: most uses reopen")
	require.Equal(t, st.Open, st.Opens-st.Evictions)
	for _, h := range hs {
		require.NoError(t, h.Close())
	}
	require.Zero(t, cfs.open.Load())
	require.Zero(t, p.Stats().Open)
	_, err := hs[0].Acquire()
	require.ErrorIs(t, err, ErrHandleClosed)
}

func TestFilePoolRecentlyUsedStaysOpen(t *testing.T) {
	paths := poolFiles(t, 10)
	p := NewFilePool(3)
	hs := make([]*Handle, len(paths))
	for i, path := range paths {
		hs[i], _ = NewHandle(p, Default, path, os.O_RDONLY, nil, nil)
	}
	// A hot file used between every other open is never the one closed.
	require.NoError(t, readAll(hs[0], paths[0]))
	for i := 1; i < len(hs); i++ {
		require.NoError(t, readAll(hs[i], paths[i]))
		require.NoError(t, readAll(hs[0], paths[0]))
	}
	require.Equal(t, int64(1+9), p.Stats().Opens, "the hot file opened once")
}

func TestFilePoolNeverClosesAFileInUse(t *testing.T) {
	paths := poolFiles(t, 6)
	cfs := &countingFS{FS: Default}
	p := NewFilePool(2)
	var held []File
	hs := make([]*Handle, len(paths))
	for i, path := range paths {
		hs[i], _ = NewHandle(p, cfs, path, os.O_RDONLY, nil, nil)
		f, err := hs[i].Acquire()
		require.NoError(t, err)
		held = append(held, f)
	}
	// Over the limit: every file is in use.
	require.Equal(t, int64(6), cfs.open.Load())
	for i, f := range held {
		buf := make([]byte, len(paths[i]))
		_, err := f.ReadAt(buf, 0)
		require.NoError(t, err, "file %d closed while in use", i)
	}
	for _, h := range hs {
		h.Release()
	}
	// The next open makes room, back to the limit.
	extra := poolFiles(t, 1)
	h, _ := NewHandle(p, cfs, extra[0], os.O_RDONLY, nil, nil)
	require.NoError(t, readAll(h, extra[0]))
	require.Equal(t, int64(2), cfs.open.Load())
}

func TestFilePoolHandsOverAnOpenFile(t *testing.T) {
	paths := poolFiles(t, 3)
	p := NewFilePool(1)
	var hs []*Handle
	for _, path := range paths {
		f, err := Default.OpenFile(path, os.O_RDONLY, 0)
		require.NoError(t, err)
		h, err := NewHandle(p, Default, path, os.O_RDONLY, f, nil)
		require.NoError(t, err)
		hs = append(hs, h)
		require.Equal(t, int64(1), p.Stats().Open)
	}
	for i, h := range hs {
		require.NoError(t, readAll(h, paths[i]))
	}
}

func TestFilePoolKeep(t *testing.T) {
	paths := poolFiles(t, 4)
	p := NewFilePool(1)
	kept, _ := NewHandle(p, Default, paths[0], os.O_RDONLY, nil, nil)
	require.NoError(t, kept.Keep())
	require.NoError(t, kept.Keep(), "twice is once")
	require.NoError(t, os.Remove(paths[0]))
	for i := 1; i < 4; i++ {
		h, _ := NewHandle(p, Default, paths[i], os.O_RDONLY, nil, nil)
		require.NoError(t, readAll(h, paths[i]))
	}
	require.NoError(t, readAll(kept, paths[0]), "a kept file is never closed, and reads past its removal")
	require.NoError(t, kept.Close())

	// A file that cannot be opened for Keep is never opened again: its
	// path may name another file by then.
	lost, _ := NewHandle(p, Default, paths[1], os.O_RDONLY, nil, nil)
	h2, _ := NewHandle(p, Default, paths[2], os.O_RDONLY, nil, nil)
	require.NoError(t, readAll(lost, paths[1]))
	require.NoError(t, readAll(h2, paths[2])) // evicts lost
	require.NoError(t, os.Remove(paths[1]))
	require.ErrorIs(t, lost.Keep(), os.ErrNotExist)
	require.NoError(t, os.WriteFile(paths[1], []byte("another file"), 0o644))
	_, err := lost.Acquire()
	require.ErrorIs(t, err, ErrHandleClosed)
}

func TestFilePoolWithoutPoolKeepsTheFileOpen(t *testing.T) {
	paths := poolFiles(t, 1)
	cfs := &countingFS{FS: Default}
	h, err := NewHandle(nil, cfs, paths[0], os.O_RDONLY, nil, nil)
	require.NoError(t, err)
	require.Equal(t, int64(1), cfs.open.Load(), "opened at once")
	require.NoError(t, readAll(h, paths[0]))
	require.NoError(t, h.Keep())
	require.NoError(t, h.Close())
	require.Zero(t, cfs.open.Load())
	_, err = NewHandle(nil, cfs, paths[0]+".missing", os.O_RDONLY, nil, nil)
	require.ErrorIs(t, err, os.ErrNotExist)
}

// dirtyOwner is a BeforeClose that holds unsynced data until flushed.
type dirtyOwner struct {
	mu      sync.Mutex
	dirty   bool
	flushes int
	veto    bool
}

func (o *dirtyOwner) beforeClose(f File, flush bool) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.veto {
		return false
	}
	if !o.dirty {
		return true
	}
	if !flush {
		return false
	}
	o.flushes++
	o.dirty = false
	_ = f.Sync()
	return true
}

func TestFilePoolFlushesDirtyFilesLast(t *testing.T) {
	paths := poolFiles(t, 3)
	p := NewFilePool(2)
	owners := make([]*dirtyOwner, 3)
	hs := make([]*Handle, 3)
	for i := range hs {
		owners[i] = &dirtyOwner{}
		hs[i], _ = NewHandle(p, Default, paths[i], os.O_RDWR, nil, owners[i].beforeClose)
	}
	// 0 is dirty and least recently used; 1 is clean: 1 goes.
	owners[0].dirty = true
	require.NoError(t, readAll(hs[0], paths[0]))
	require.NoError(t, readAll(hs[1], paths[1]))
	require.NoError(t, readAll(hs[2], paths[2]))
	require.Equal(t, int64(2), p.Stats().Open)
	require.Zero(t, owners[0].flushes)
	require.Equal(t, int64(1), p.Stats().Evictions)

	// Only dirty files left to close: one is flushed, then closed.
	owners[2].dirty = true
	require.NoError(t, readAll(hs[1], paths[1])) // reopens 1: 0 and 2 are dirty
	require.Equal(t, int64(2), p.Stats().Open)
	require.Equal(t, 1, owners[0].flushes+owners[2].flushes)

	// An owner that cannot act now keeps its file open: the pool goes over.
	for _, o := range owners {
		o.veto = true
	}
	h, _ := NewHandle(p, Default, paths[0]+"x", os.O_RDWR|os.O_CREATE, nil, nil)
	_, err := h.Acquire()
	require.NoError(t, err)
	h.Release()
	require.Equal(t, int64(3), p.Stats().Open)
}

func TestFilePoolConcurrentUse(t *testing.T) {
	paths := poolFiles(t, 32)
	cfs := &countingFS{FS: Default}
	p := NewFilePool(4)
	hs := make([]*Handle, len(paths))
	for i, path := range paths {
		hs[i], _ = NewHandle(p, cfs, path, os.O_RDONLY, nil, nil)
	}
	const workers = 8
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				j := (i*7 + w*13) % len(hs)
				if err := readAll(hs[j], paths[j]); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	// An eviction leaves open at most the limit plus the files in use
	// while it swept (one a worker), and each worker opens at most one
	// more before its own eviction.
	require.LessOrEqual(t, cfs.max.Load(), int64(4+2*workers))
	// With nothing in use, the next open brings the pool to its limit.
	extra := poolFiles(t, 1)
	h, _ := NewHandle(p, cfs, extra[0], os.O_RDONLY, nil, nil)
	require.NoError(t, readAll(h, extra[0]))
	require.LessOrEqual(t, cfs.open.Load(), int64(4))
	require.Equal(t, cfs.open.Load(), p.Stats().Open)
	for _, h := range append(hs, h) {
		require.NoError(t, h.Close())
	}
	require.Zero(t, cfs.open.Load())
	require.Zero(t, p.Stats().Open)
}

// BenchmarkHandleUse is the cost a use of a file adds to every read and
// write: Acquire and Release of an open file, without a pool, with one, and
// with one from every processor at once (one handle: the worst sharing).
func BenchmarkHandleUse(b *testing.B) {
	dir := b.TempDir()
	path := filepath.Join(dir, "f")
	require.NoError(b, os.WriteFile(path, []byte("x"), 0o644))
	for _, pooled := range []bool{false, true} {
		var pool *FilePool
		if pooled {
			pool = NewFilePool(16)
		}
		h, err := NewHandle(pool, Default, path, os.O_RDONLY, nil, nil)
		require.NoError(b, err)
		name := map[bool]string{false: "pool=none", true: "pool=16"}[pooled]
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if _, err := h.Acquire(); err != nil {
					b.Fatal(err)
				}
				h.Release()
			}
		})
		b.Run(name+"/parallel", func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := h.Acquire(); err != nil {
						b.Error(err)
						return
					}
					h.Release()
				}
			})
		})
		require.NoError(b, h.Close())
	}
}

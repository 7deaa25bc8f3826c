package segment

import (
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/spoolmq/spool/internal/vfs"
	"github.com/stretchr/testify/require"
)

// pooled returns small options whose segments share a pool of limit files,
// on a fault-injecting file system.
func pooled(limit int) (Options, *vfs.Switch, *vfs.FilePool) {
	sw := &vfs.Switch{}
	opts := small
	opts.FS = vfs.NewFaultFS(vfs.Default, sw.Inject)
	opts.Files = vfs.NewFilePool(limit)
	return opts, sw, opts.Files
}

// evict makes the pool close s's file, by using others of its segments.
func evict(t *testing.T, others []*Segment) {
	t.Helper()
	for _, o := range others {
		_, err := o.NextOffset()
		require.NoError(t, err)
		_, err = o.Find(o.Base(), o.Committed())
		require.True(t, err == nil || err == io.EOF, "%v", err)
	}
}

func TestSegmentsShareAPoolOfFiles(t *testing.T) {
	dir := t.TempDir()
	opts, _, pool := pooled(2)
	rng := rand.New(rand.NewPCG(16, 16))
	var segs []*Segment
	var all [][]written
	for i := 0; i < 6; i++ {
		base := int64(i * 10_000)
		s, err := Create(dir, base, opts)
		require.NoError(t, err)
		all = append(all, fill(t, s, base, 30, rng))
		segs = append(segs, s)
		require.LessOrEqual(t, pool.Stats().Open, int64(2))
	}
	// Every segment reads back whole, each reopening its file in turn.
	for round := 0; round < 2; round++ {
		for i, s := range segs {
			checkLookups(t, s, all[i])
			out, _, err := s.Read(nil, all[i][0].h.BaseOffset, 1<<20, s.Committed())
			require.NoError(t, err)
			var want []byte
			for _, w := range all[i] {
				want = append(want, w.b...)
			}
			require.Equal(t, want, out)
			require.LessOrEqual(t, pool.Stats().Open, int64(2))
		}
	}
	require.Positive(t, pool.Stats().Evictions)
	for i, s := range segs {
		require.NoError(t, s.Seal())
		require.NoError(t, s.Sync())
		require.NoError(t, s.Close(true))
		// Reopened read-only, a sealed segment opens no file until used.
		before := pool.Stats().Opens
		r, err := Open(dir, s.Base(), opts, false)
		require.NoError(t, err)
		require.Equal(t, before, pool.Stats().Opens)
		checkLookups(t, r, all[i])
		require.NoError(t, r.Close(true))
	}
	require.Zero(t, pool.Stats().Open, "closed segments leave nothing in the pool")
}

// A file the pool closes with writes not yet fsynced is fsynced first, and
// a failure there fails every later Sync: reopening the file must neither
// lose the error nor make the data look synced.
func TestPoolClosingADirtyFileKeepsItsFsyncError(t *testing.T) {
	dir := t.TempDir()
	opts, sw, pool := pooled(1)
	rng := rand.New(rand.NewPCG(17, 17))
	a, err := Create(dir, 0, opts)
	require.NoError(t, err)
	fill(t, a, 0, 5, rng) // written, not synced
	sw.FailAfter(vfs.OpSync, func(p string) bool { return p == a.Path() }, 0, vfs.ErrIO, 1)
	b, err := Create(dir, 1000, opts) // takes the pool's one slot: a must go
	require.NoError(t, err)
	require.Equal(t, int64(1), pool.Stats().Evictions)
	require.Equal(t, 1, sw.Count(vfs.OpSync), "a was fsynced before its file closed")

	// The fault is spent: a fresh fsync would succeed. It must not be
	// believed.
	err = a.Sync()
	require.ErrorIs(t, err, vfs.ErrIO)
	require.ErrorIs(t, a.Sync(), vfs.ErrIO, "sticky")
	require.NoError(t, b.Sync())

	// Without a failure the data is on disk when the file closes, and Sync
	// has nothing left to do.
	c, err := Create(dir, 2000, opts)
	require.NoError(t, err)
	fill(t, c, 2000, 5, rng)
	syncs := sw.Count(vfs.OpSync)
	evict(t, []*Segment{b})
	require.Equal(t, syncs+1, sw.Count(vfs.OpSync), "c fsynced as its file closed")
	require.NoError(t, c.Sync())
	require.Equal(t, syncs+1, sw.Count(vfs.OpSync), "and not again")
	for _, s := range []*Segment{a, b, c} {
		_ = s.Close(false)
	}
}

// A clean file goes before a dirty one, so that an fsync lands on an
// opener's path only when nothing else can go.
func TestPoolClosesCleanFilesFirst(t *testing.T) {
	dir := t.TempDir()
	opts, sw, pool := pooled(2)
	rng := rand.New(rand.NewPCG(18, 18))
	dirty, err := Create(dir, 0, opts)
	require.NoError(t, err)
	fill(t, dirty, 0, 5, rng)
	clean, err := Create(dir, 1000, opts)
	require.NoError(t, err)
	fill(t, clean, 1000, 5, rng)
	require.NoError(t, clean.Sync())
	syncs := sw.Count(vfs.OpSync)
	third, err := Create(dir, 2000, opts)
	require.NoError(t, err)
	require.Equal(t, int64(1), pool.Stats().Evictions)
	require.Equal(t, syncs, sw.Count(vfs.OpSync), "the clean file went, unsynced")
	opens := sw.Count(vfs.OpOpen)
	require.NoError(t, dirty.Sync())
	require.Equal(t, opens, sw.Count(vfs.OpOpen), "the dirty file was still open")
	require.Equal(t, syncs+1, sw.Count(vfs.OpSync), "the dirty one kept its file until its own Sync")
	for _, s := range []*Segment{dirty, clean, third} {
		_ = s.Close(false)
	}
}

// Readers holding a segment go on reading the file they found after it is
// deleted, even if the pool had closed it: Delete reopens and keeps it
// before the path goes, rather than letting a reader open whatever the
// path names later.
func TestReadersOutliveDeleteOfAPooledFile(t *testing.T) {
	dir := t.TempDir()
	opts, _, _ := pooled(1)
	rng := rand.New(rand.NewPCG(19, 19))
	s, err := Create(dir, 0, opts)
	require.NoError(t, err)
	ws := fill(t, s, 0, 20, rng)
	require.NoError(t, s.Sync())
	other, err := Create(dir, 5000, opts) // closes s's file
	require.NoError(t, err)
	require.True(t, s.Acquire())
	require.NoError(t, s.Delete())
	_, err = os.Stat(s.Path())
	require.ErrorIs(t, err, os.ErrNotExist)
	// Another file takes the path, as a compaction's swap would.
	require.NoError(t, os.WriteFile(s.Path(), []byte(strings.Repeat("x", 4096)), 0o644))
	evict(t, []*Segment{other})
	out, _, err := s.Read(nil, 0, 1<<20, s.Committed())
	require.NoError(t, err)
	require.Equal(t, ws[0].b, out[:ws[0].h.Size])
	s.Release()
	require.False(t, s.Acquire())
	require.NoError(t, other.Close(false))
}

// A file the segment holds for a zero-copy send stays open however many
// others are opened meanwhile.
func TestAcquiredFileStaysOpen(t *testing.T) {
	dir := t.TempDir()
	opts, _, pool := pooled(1)
	rng := rand.New(rand.NewPCG(20, 20))
	s, err := Create(dir, 0, opts)
	require.NoError(t, err)
	ws := fill(t, s, 0, 5, rng)
	f, err := s.AcquireFile()
	require.NoError(t, err)
	var others []*Segment
	for i := 1; i <= 3; i++ {
		o, err := Create(dir, int64(i*1000), opts)
		require.NoError(t, err)
		others = append(others, o)
	}
	require.Equal(t, int64(2), pool.Stats().Open, "the limit, plus the file in use")
	buf := make([]byte, ws[0].h.Size)
	_, err = f.ReadAt(buf, 0)
	require.NoError(t, err, "not closed under its user")
	require.Equal(t, ws[0].b, buf)
	s.ReleaseFile()
	require.NoError(t, s.Close(false))
	for _, o := range others {
		require.NoError(t, o.Close(false))
	}
	require.Zero(t, pool.Stats().Open)
	_, err = s.AcquireFile()
	require.ErrorIs(t, err, ErrClosed)
}

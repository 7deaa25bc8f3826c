package log

import (
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/spoolmq/spool/internal/vfs"
	"github.com/spoolmq/spool/segment"
	"github.com/stretchr/testify/require"
)

// A Truncate that stops part way - a crash between two of its steps, played
// here by a fault that fails the step - must leave a log that reopens, under
// Sync, as a dense prefix of the old one that still holds everything below
// the truncation offset: the old log, or the old log cut at a segment
// boundary at or past the offset, or the truncated log. Two orders were
// wrong: cutting the files before lowering the recovery point in the
// checkpoint left a checkpoint that promised flushed offsets the files no
// longer held (Open refused the log), and cutting the kept segment before
// deleting the later ones left those segments after a hole (Open served
// records that had been truncated, past missing offsets).
func TestTruncateFaults(t *testing.T) {
	isCheckpoint := func(p string) bool { return filepath.Base(p) == CheckpointFile+".tmp" }
	cases := map[string]func(sw *vfs.Switch, target, last string){
		"checkpoint write": func(sw *vfs.Switch, _, _ string) { sw.FailAfter(vfs.OpRename, isCheckpoint, 0, vfs.ErrIO, -1) },
		"later segment gone": func(sw *vfs.Switch, _, last string) {
			sw.FailAfter(vfs.OpRemove, func(p string) bool { return p == last }, 0, vfs.ErrIO, -1)
		},
		"directory fsync": func(sw *vfs.Switch, _, _ string) { sw.FailAfter(vfs.OpSyncDir, nil, 0, vfs.ErrIO, -1) },
		"cut": func(sw *vfs.Switch, target, _ string) {
			sw.FailAfter(vfs.OpTruncate, func(p string) bool { return p == target }, 0, vfs.ErrIO, -1)
		},
		"sync of the cut": func(sw *vfs.Switch, target, _ string) {
			sw.FailAfter(vfs.OpSync, func(p string) bool { return p == target }, 0, vfs.ErrIO, -1)
		},
		"final checkpoint": func(sw *vfs.Switch, _, _ string) { sw.FailAfter(vfs.OpRename, isCheckpoint, 1, vfs.ErrIO, -1) },
	}
	for name, arm := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			var sw vfs.Switch
			l := faultLog(t, dir, &sw, Sync)
			end := appendN(t, l, 400, 1, rand.New(rand.NewPCG(8, 8))) // one record a batch: cuts are exact
			require.NoError(t, l.Sync())                              // the recovery point is the end
			want := readAll(t, l, 0)
			segs := l.segments()
			require.Greater(t, len(segs), 4)
			const at = 100
			target := segs[0]
			for _, s := range segs {
				if s.Base() <= at {
					target = s
				}
			}
			require.Less(t, target.Base(), int64(at), "the cut falls inside a segment")
			arm(&sw, target.Path(), segs[len(segs)-1].Path())

			_, err := l.Truncate(at)
			require.ErrorIs(t, err, ErrFailed)
			sw.Reset()
			l.abandon()

			l, err = Open(dir, tiny())
			require.NoError(t, err, "a log cut part way must reopen")
			defer l.Close()
			got := readAll(t, l, 0)
			require.GreaterOrEqual(t, l.EndOffset(), int64(at))
			require.LessOrEqual(t, l.EndOffset(), end)
			require.Equal(t, want[:len(got)], got, "a dense prefix of the old log")
			require.Equal(t, l.EndOffset(), int64(len(got)))
		})
	}
}

// After Truncate, the files and the checkpoint agree at every step of a
// reopen: truncating into a sealed segment and into the active one, then
// reopening after an unclean stop, keeps exactly the records below the cut.
func TestTruncateThenCrash(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, tiny())
	require.NoError(t, err)
	appendN(t, l, 400, 1, rand.New(rand.NewPCG(9, 9)))
	require.NoError(t, l.Sync())
	for _, at := range []int64{350, 120} {
		end, err := l.Truncate(at)
		require.NoError(t, err)
		require.Equal(t, at, end)
		l.abandon()
		l, err = Open(dir, tiny())
		require.NoError(t, err)
		require.Equal(t, at, l.EndOffset())
		checkRecords(t, readAll(t, l, 0), 0, at)
	}
	require.Equal(t, []string{segment.FileName(l.segments()[len(l.segments())-1].Base(), segment.LogSuffix)},
		segmentFiles(t, dir)[len(segmentFiles(t, dir))-1:])
	require.NoError(t, l.Close())
}

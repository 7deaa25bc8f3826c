package log

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/spoolmq/spool/record"
	"github.com/stretchr/testify/require"
)

// TestAppendReplicaCopiesLeaderBytes copies one log into another batch by
// batch, as a follower does, and checks the copy is byte-identical (offsets
// and leader epochs included) while the follower's own epoch is ignored.
func TestAppendReplicaCopiesLeaderBytes(t *testing.T) {
	leader, err := Open(t.TempDir(), tiny())
	require.NoError(t, err)
	defer leader.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	for epoch := int32(0); epoch < 4; epoch++ {
		leader.SetLeaderEpoch(epoch)
		appendN(t, leader, 60, 7, rng)
	}
	follower, err := Open(t.TempDir(), tiny())
	require.NoError(t, err)
	defer follower.Close()
	follower.SetLeaderEpoch(99) // must not be stamped on replicated batches

	for off := int64(0); off < leader.EndOffset(); {
		buf, err := leader.ReadUpTo(nil, off, 500, leader.EndOffset())
		require.NoError(t, err)
		for len(buf) > 0 {
			b, n, err := record.ParseBatch(buf)
			require.NoError(t, err)
			p, err := follower.AppendReplicaNoWait(b)
			require.NoError(t, err)
			require.NoError(t, follower.WaitDurable(p))
			off = b.NextOffset()
			buf = buf[n:]
		}
	}
	require.Equal(t, leader.EndOffset(), follower.EndOffset())
	want, err := leader.Read(0, 1<<30)
	require.NoError(t, err)
	got, err := follower.Read(0, 1<<30)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "the follower's log differs from the leader's")
}

func TestAppendReplicaRefusesGapsAndDamage(t *testing.T) {
	l, err := Open(t.TempDir(), tiny())
	require.NoError(t, err)
	defer l.Close()
	_, err = l.Append(record.Record{Value: []byte("a")})
	require.NoError(t, err)

	b, err := record.NewBatch([]record.Record{{Value: []byte("b")}, {Value: []byte("c")}}, record.BatchOptions{})
	require.NoError(t, err)
	b.SetPartitionLeaderEpoch(3)

	for _, base := range []int64{0, 2, 5} { // behind, ahead, far ahead
		b.SetBaseOffset(base)
		_, err = l.AppendReplicaNoWait(b)
		require.ErrorIs(t, err, ErrOffsetMismatch, "base %d", base)
	}
	b.SetBaseOffset(1)
	bad := append([]byte(nil), b.Bytes()...)
	bad[len(bad)-1] ^= 0x40 // a bit flip the CRC covers
	_, err = l.AppendReplicaNoWait(mustParse(t, bad))
	require.ErrorIs(t, err, ErrCorrupt)
	_, err = l.AppendReplicaNoWait(record.Batch{})
	require.ErrorIs(t, err, ErrCorrupt)
	require.Equal(t, int64(1), l.EndOffset(), "refused batches change nothing")

	p, err := l.AppendReplicaNoWait(b)
	require.NoError(t, err)
	require.NoError(t, l.WaitDurable(p))
	require.Equal(t, int64(3), l.EndOffset())
	buf, err := l.Read(1, 1<<20)
	require.NoError(t, err)
	got := mustParse(t, buf)
	require.Equal(t, int32(3), got.PartitionLeaderEpoch())
	require.Equal(t, int64(1), got.BaseOffset())
}

// TestCrashKeepsOrDropsUnsynced crashes a log (no flush, no clean-shutdown
// mark) and reopens it: written records survive a process crash; with
// dropUnsynced only the durable ones do.
func TestCrashKeepsOrDropsUnsynced(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		drop bool
		want int64
	}{
		{"None, process crash", Options{Flush: None, SegmentBytes: 4096}, false, 200},
		{"None, power loss", Options{Flush: None, SegmentBytes: 4096, CheckpointInterval: time.Hour}, true, 0},
		{"Sync, power loss", Options{Flush: Sync, SegmentBytes: 4096}, true, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l, err := Open(dir, tc.opts)
			require.NoError(t, err)
			for i := int64(0); i < 200; i++ {
				_, err := l.Append(record.Record{Value: value(i), Timestamp: time.UnixMilli(1_700_000_000_000 + i)})
				require.NoError(t, err)
			}
			require.NoError(t, l.Crash(tc.drop))
			flushed := l.rp.Offset // what the last flush covered
			require.ErrorIs(t, l.Crash(false), ErrClosed)
			cp, err := ReadCheckpoint(dir)
			require.NoError(t, err)
			require.False(t, cp.CleanShutdown)

			l, err = Open(dir, tc.opts)
			require.NoError(t, err)
			defer l.Close()
			if tc.name == "None, power loss" {
				// Segments are flushed when they are sealed: those stay.
				require.Equal(t, flushed, l.EndOffset())
			} else {
				require.Equal(t, tc.want, l.EndOffset())
			}
			checkRecords(t, readAll(t, l, 0), 0, l.EndOffset())
		})
	}
}

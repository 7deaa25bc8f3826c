package record

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFilterKeepsOffsetsAndTimestamps(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	var it Iterator
	for _, c := range codecs {
		recs := sampleRecords(rng, 50)
		b, err := NewBatch(recs, BatchOptions{Compression: c, Producer: &ProducerInfo{ID: 3, Epoch: 2, BaseSequence: 7}})
		require.NoError(t, err)
		b.SetBaseOffset(1000)
		b.SetPartitionLeaderEpoch(4)

		keep := func(r *Record) bool { return r.Offset%3 != 0 }
		out, kept, err := Filter(nil, b, &it, keep)
		require.NoError(t, err)
		fb, n, err := ParseBatch(out)
		require.NoError(t, err)
		require.Equal(t, len(out), n)
		require.NoError(t, fb.Verify())
		require.Equal(t, c, fb.Compression())
		require.Equal(t, int64(1000), fb.BaseOffset())
		require.Equal(t, b.LastOffset(), fb.LastOffset(), "last offset delta kept")
		require.Equal(t, int32(4), fb.PartitionLeaderEpoch())
		require.Equal(t, int64(3), fb.ProducerID())
		require.Equal(t, int32(kept), fb.NumRecords())

		got, err := fb.Records()
		require.NoError(t, err)
		var want []Record
		var maxTS int64 = -1
		for i, r := range recs {
			if (1000+int64(i))%3 != 0 {
				r.Offset = 1000 + int64(i)
				want = append(want, r)
				maxTS = max(maxTS, r.Timestamp.UnixMilli())
			}
		}
		require.Len(t, got, len(want))
		require.Equal(t, maxTS, fb.MaxTimestamp())
		for i := range want {
			require.Equal(t, want[i].Offset, got[i].Offset)
			require.Equal(t, want[i].Timestamp.UnixMilli(), got[i].Timestamp.UnixMilli())
			require.Equal(t, want[i].Key, got[i].Key)
			require.Equal(t, want[i].Value, got[i].Value)
			require.Equal(t, len(want[i].Headers), len(got[i].Headers))
		}

		// Nothing kept: nothing written.
		out, kept, err = Filter([]byte("x"), b, &it, func(*Record) bool { return false })
		require.NoError(t, err)
		require.Zero(t, kept)
		require.Equal(t, "x", string(out))
	}
}

func TestFilterRejectsCorruptBatch(t *testing.T) {
	b, err := NewBatch([]Record{{Value: []byte("a")}}, BatchOptions{})
	require.NoError(t, err)
	raw := append([]byte(nil), b.Bytes()...)
	raw[len(raw)-1] ^= 1
	pb, _, err := ParseBatch(raw)
	require.NoError(t, err)
	var it Iterator
	_, _, err = Filter(nil, pb, &it, func(*Record) bool { return true })
	require.ErrorIs(t, err, ErrCorrupt)
}

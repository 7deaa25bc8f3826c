package record

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/spoolmq/spool/internal/race"
	"github.com/stretchr/testify/require"
)

// A Builder fed records one at a time makes exactly the batch AppendBatch
// makes from all of them.
func TestBuilderMatchesAppendBatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	var bld Builder
	for _, c := range codecs {
		for _, n := range []int{1, 3, 200} {
			recs := sampleRecords(rng, n)
			o := BatchOptions{Compression: c, Producer: &ProducerInfo{ID: 5, Epoch: 1, BaseSequence: 9}}
			want, err := NewBatch(recs, o)
			require.NoError(t, err)

			bld.Reset(o)
			for i := range recs {
				require.NoError(t, bld.Add(&recs[i]))
			}
			require.Equal(t, n, bld.Len())
			got, err := bld.Build()
			require.NoError(t, err)
			require.Equal(t, want.Bytes(), got.Bytes(), "%s x%d", c, n)
			if c == None {
				require.Equal(t, got.Size(), bld.Size())
			}
		}
	}
}

func TestBuilderErrors(t *testing.T) {
	var bld Builder
	_, err := bld.Build()
	require.ErrorIs(t, err, ErrCorrupt)
	bld.Reset(BatchOptions{})
	require.Error(t, bld.Add(&Record{Timestamp: time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)}))
	require.Equal(t, 0, bld.Len())
	require.Equal(t, HeaderSize, bld.Size())
	// The zero Builder works without Reset.
	var z Builder
	require.NoError(t, z.Add(&Record{Value: []byte("v")}))
	b, err := z.Build()
	require.NoError(t, err)
	require.NoError(t, b.Verify())
}

func TestBuilderReuseDoesNotAllocate(t *testing.T) {
	if race.Enabled {
		t.Skip("sync.Pool drops items under -race; allocation counts are checked without it")
	}
	recs := sampleRecords(rand.New(rand.NewPCG(33, 34)), 50)
	for _, c := range codecs {
		var bld Builder
		run := func() {
			bld.Reset(BatchOptions{Compression: c})
			for i := range recs {
				_ = bld.Add(&recs[i])
			}
			_, _ = bld.Build()
		}
		run()
		require.Zero(t, testing.AllocsPerRun(20, run), c.String())
	}
}

package record

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestControlBatchLayout(t *testing.T) {
	for _, typ := range []ControlType{ControlAbort, ControlCommit} {
		b, err := NewControlBatch(77, 3, typ, 9, time.UnixMilli(1_700_000_000_000))
		require.NoError(t, err)
		require.NoError(t, b.Verify())
		require.Equal(t, int16(0x30), b.Attributes())
		require.True(t, b.IsControl())
		require.True(t, b.IsTransactional())
		require.Equal(t, int64(77), b.ProducerID())
		require.Equal(t, int16(3), b.ProducerEpoch())
		require.Equal(t, int32(-1), b.BaseSequence())
		require.Equal(t, int32(1), b.NumRecords())

		// An independent decoder sees Kafka's marker bytes.
		var kb kmsg.RecordBatch
		require.NoError(t, kb.ReadFrom(b.Bytes()))
		require.Equal(t, int16(0x30), kb.Attributes)
		var kr kmsg.Record
		require.NoError(t, kr.ReadFrom(kb.Records))
		require.Equal(t, []byte{0, 0, 0, byte(typ)}, kr.Key)
		require.Equal(t, []byte{0, 0, 0, 0, 0, 9}, kr.Value)

		cr, err := ParseControlBatch(b)
		require.NoError(t, err)
		require.Equal(t, ControlRecord{Type: typ, CoordinatorEpoch: 9}, cr)
	}
	require.Equal(t, "ABORT", ControlAbort.String())
	require.Equal(t, "COMMIT", ControlCommit.String())
}

func TestParseControlRecordRejects(t *testing.T) {
	key := func(v, typ int16) []byte {
		return binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, uint16(v)), uint16(typ))
	}
	val := []byte{0, 0, 0, 0, 0, 1}
	cases := []struct {
		name       string
		key, value []byte
	}{
		{"nil key", nil, val},
		{"short key", []byte{0, 0, 0}, val},
		{"long key", append(key(0, 1), 0), val},
		{"key version 1", key(1, 1), val},
		{"KRaft type 2", key(0, 2), val},
		{"negative type", key(0, -1), val},
		{"nil value", key(0, 0), nil},
		{"short value", key(0, 0), []byte{0, 0, 0, 0, 1}},
		{"value version 1", key(0, 0), []byte{0, 1, 0, 0, 0, 1}},
		{"version 0 value too long", key(0, 0), append(append([]byte{}, val...), 0)},
	}
	for _, c := range cases {
		_, err := ParseControlRecord(c.key, c.value)
		require.ErrorIs(t, err, ErrBadControlRecord, c.name)
		require.ErrorIs(t, err, ErrCorrupt, c.name)
	}
	cr, err := ParseControlRecord(key(0, 1), []byte{0, 0, 0xff, 0xff, 0xff, 0xfe})
	require.NoError(t, err)
	require.Equal(t, ControlRecord{Type: ControlCommit, CoordinatorEpoch: -2}, cr)
}

func TestParseControlBatchRejects(t *testing.T) {
	data, err := NewBatch([]Record{{Key: []byte{0, 0, 0, 1}, Value: []byte{0, 0, 0, 0, 0, 1}}}, BatchOptions{Transactional: true})
	require.NoError(t, err)
	_, err = ParseControlBatch(data)
	require.ErrorIs(t, err, ErrBadControlRecord, "not a control batch")

	_, err = NewControlBatch(-1, 0, ControlCommit, 0, time.Time{})
	require.ErrorIs(t, err, ErrBadControlRecord)
	_, err = NewControlBatch(1, 0, ControlType(3), 0, time.Time{})
	require.ErrorIs(t, err, ErrBadControlRecord)

	b, err := NewControlBatch(1, 0, ControlAbort, 0, time.Time{})
	require.NoError(t, err)
	flipped := append([]byte(nil), b.Bytes()...)
	flipped[len(flipped)-1] ^= 1
	fb, _, err := ParseBatch(flipped)
	require.NoError(t, err)
	_, err = ParseControlBatch(fb)
	require.ErrorIs(t, err, ErrCorrupt, "a bit flip fails the CRC")
	require.False(t, errors.Is(err, ErrBadControlRecord))
}

// FuzzParseControlRecord: nothing panics, and what parses re-encodes to
// the same bytes.
func FuzzParseControlRecord(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1}, []byte{0, 0, 0, 0, 0, 5})
	f.Add([]byte{0, 0, 0, 0}, []byte{0, 0, 0, 0, 0})
	f.Add([]byte{}, []byte{})
	f.Fuzz(func(t *testing.T, key, value []byte) {
		cr, err := ParseControlRecord(key, value)
		if err != nil {
			return
		}
		b, err := NewControlBatch(1, 0, cr.Type, cr.CoordinatorEpoch, time.UnixMilli(1))
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseControlBatch(b)
		if err != nil || again != cr {
			t.Fatalf("%+v did not round-trip: %+v, %v", cr, again, err)
		}
	})
}

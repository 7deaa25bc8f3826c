package segment

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTxnIndexLayout(t *testing.T) {
	e := AbortedTxn{ProducerID: 0x0102030405060708, FirstOffset: 10, LastOffset: 20, LastStableOffset: 21}
	b := AppendTxnIndexEntry(nil, e)
	require.Len(t, b, TxnIndexEntrySize)
	require.Equal(t, []byte{0, 0, 1, 2, 3, 4, 5, 6, 7, 8}, b[:10], "version 0, then the producer id")
	got, err := ParseTxnIndex(b)
	require.NoError(t, err)
	require.Equal(t, []AbortedTxn{e}, got)
}

func TestParseTxnIndexRejects(t *testing.T) {
	good := AppendTxnIndexEntry(nil, AbortedTxn{ProducerID: 1, FirstOffset: 10, LastOffset: 20, LastStableOffset: 21})
	second := AppendTxnIndexEntry(nil, AbortedTxn{ProducerID: 2, FirstOffset: 12, LastOffset: 25, LastStableOffset: 26})
	cases := map[string][]byte{
		"torn":          append(append([]byte{}, good...), second[:20]...),
		"version 1":     append(append([]byte{}, good...), append([]byte{0, 1}, second[2:]...)...),
		"out of order":  append(append([]byte{}, second...), good...),
		"first > last":  AppendTxnIndexEntry(nil, AbortedTxn{ProducerID: 1, FirstOffset: 30, LastOffset: 20, LastStableOffset: 21}),
		"lso past last": AppendTxnIndexEntry(nil, AbortedTxn{ProducerID: 1, FirstOffset: 10, LastOffset: 20, LastStableOffset: 22}),
		"negative pid":  AppendTxnIndexEntry(nil, AbortedTxn{ProducerID: -1, FirstOffset: 10, LastOffset: 20, LastStableOffset: 21}),
	}
	for name, data := range cases {
		_, err := ParseTxnIndex(data)
		require.ErrorIs(t, err, ErrBadTxnIndex, name)
	}
}

// TestSegmentTxnIndex: created empty with the segment, appended in marker
// order, cut by Truncate, removed by Delete; a missing file is reported.
func TestSegmentTxnIndex(t *testing.T) {
	dir := t.TempDir()
	s, err := Create(dir, 0, Options{})
	require.NoError(t, err)
	for i := range 10 {
		_, err := s.Append(batchAt(t, int64(i), 1, 1000, 10))
		require.NoError(t, err)
	}
	require.NoError(t, s.TxnIndexErr())
	st, err := os.Stat(s.TxnIndexPath())
	require.NoError(t, err)
	require.Zero(t, st.Size())

	e1 := AbortedTxn{ProducerID: 1, FirstOffset: 0, LastOffset: 3, LastStableOffset: 4}
	e2 := AbortedTxn{ProducerID: 2, FirstOffset: 1, LastOffset: 7, LastStableOffset: 8}
	require.NoError(t, s.AppendAbortedTxn(e1))
	require.ErrorIs(t, s.AppendAbortedTxn(e1), ErrBadTxnIndex, "not after the last entry")
	require.NoError(t, s.AppendAbortedTxn(e2))
	got, err := s.AbortedTxns()
	require.NoError(t, err)
	require.Equal(t, []AbortedTxn{e1, e2}, got)

	_, err = s.Truncate(5)
	require.NoError(t, err)
	got, err = s.AbortedTxns()
	require.NoError(t, err)
	require.Equal(t, []AbortedTxn{e1}, got)
	onDisk, err := ReadTxnIndexFile(nil, s.TxnIndexPath())
	require.NoError(t, err)
	require.Equal(t, []AbortedTxn{e1}, onDisk)

	require.NoError(t, s.Close(true))
	require.NoError(t, os.Remove(filepath.Join(dir, FileName(0, TxnIndexSuffix))))
	s, err = Open(dir, 0, Options{}, true)
	require.NoError(t, err)
	require.ErrorIs(t, s.TxnIndexErr(), ErrNoTxnIndex)
	require.NoError(t, s.TruncateAbortedTxns(0))
	require.NoError(t, s.TxnIndexErr(), "an empty one replaces it")
	require.NoError(t, s.Delete())
	_, err = os.Stat(s.TxnIndexPath())
	require.ErrorIs(t, err, os.ErrNotExist)
}

// FuzzParseTxnIndex: nothing panics; what parses re-encodes to the same
// bytes.
func FuzzParseTxnIndex(f *testing.F) {
	f.Add(AppendTxnIndexEntry(nil, AbortedTxn{ProducerID: 1, FirstOffset: 10, LastOffset: 20, LastStableOffset: 21}))
	f.Add([]byte{})
	f.Add(make([]byte, 33))
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := ParseTxnIndex(data)
		if err != nil {
			return
		}
		var out []byte
		for _, e := range entries {
			out = AppendTxnIndexEntry(out, e)
		}
		if string(out) != string(data) {
			t.Fatalf("did not round-trip")
		}
	})
}

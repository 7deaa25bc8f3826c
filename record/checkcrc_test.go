package record

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// CheckCRC: a batch whose CRC matches comes back marked, and Verify of the
// marked batch does not compute the CRC again (a byte changed after the
// check goes unseen by it, as documented, while a fresh parse of the same
// bytes sees it); a mismatch is ErrCorrupt and the batch comes back
// unmarked.
func TestCheckCRC(t *testing.T) {
	b, err := NewBatch([]Record{{Value: []byte("v")}}, BatchOptions{})
	require.NoError(t, err)
	checked, err := b.CheckCRC()
	require.NoError(t, err)
	require.NoError(t, checked.Verify())

	raw := checked.Bytes()
	raw[len(raw)-1] ^= 0xff // a byte the CRC covers
	require.NoError(t, checked.Verify(), "the mark stands for the bytes as checked")
	fresh, _, err := ParseBatch(raw)
	require.NoError(t, err)
	require.ErrorIs(t, fresh.Verify(), ErrCorrupt)
	again, err := fresh.CheckCRC()
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorIs(t, again.Verify(), ErrCorrupt, "a failed check marks nothing")

	var short Batch
	_, err = short.CheckCRC()
	require.ErrorIs(t, err, ErrCorrupt)
}

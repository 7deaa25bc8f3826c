package share

import (
	"bytes"
	"testing"
	"time"
)

// Restore takes any bytes without panicking: a snapshot it accepts
// re-encodes to itself (up to the done prefix it drops), and the partition
// it gives works.
func FuzzRestore(f *testing.F) {
	p := New(Config{}, 5)
	p.Acquire("m", 5, []int64{5, 6, 8}, 10, time.Unix(0, 0))
	_, _ = p.Acknowledge("m", []AckBatch{{First: 6, Last: 6, Types: []AckType{Accept}}}, time.Unix(0, 0))
	f.Add(p.Snapshot())
	f.Add(New(Config{}, 0).Snapshot())
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := Restore(Config{MaxInFlight: 100}, b)
		if err != nil {
			return
		}
		again, err := Restore(Config{MaxInFlight: 100}, q.Snapshot())
		if err != nil {
			t.Fatalf("a restored snapshot does not restore: %v", err)
		}
		if !bytes.Equal(again.Snapshot(), q.Snapshot()) {
			t.Fatal("snapshot not stable")
		}
		from, ok := q.FetchOffset()
		if ok {
			q.Acquire("x", from, []int64{from, from + 1}, 2, time.Unix(0, 0))
		}
		q.Expire(time.Unix(100, 0))
	})
}

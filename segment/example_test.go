package segment_test

import (
	"fmt"
	"os"

	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/segment"
)

// A segment takes batches whose offsets are already stamped, and finds the
// batch holding an offset through its index.
func ExampleCreate() {
	dir, _ := os.MkdirTemp("", "segment-example-")
	defer os.RemoveAll(dir)
	s, err := segment.Create(dir, 100, segment.Options{})
	if err != nil {
		panic(err)
	}
	for off := int64(100); off < 130; off += 10 {
		recs := make([]record.Record, 10)
		b, _ := record.NewBatch(recs, record.BatchOptions{})
		b.SetBaseOffset(off)
		if _, err := s.Append(b); err != nil {
			panic(err)
		}
	}
	s.Commit(s.Size())
	h, err := s.Find(115, s.Committed())
	if err != nil {
		panic(err)
	}
	next, _ := s.NextOffset()
	fmt.Println(h.BaseOffset, h.LastOffset, h.Position, next)
	if err := s.Close(true); err != nil {
		panic(err)
	}
	// Output: 110 119 131 130
}

package record_test

import (
	"fmt"
	"time"

	"github.com/spoolmq/spool/record"
)

// A batch is encoded from records, stamped with its offset by whoever
// appends it, and decoded by an Iterator, which checks the CRC first.
func ExampleNewBatch() {
	b, err := record.NewBatch([]record.Record{
		{Key: []byte("k1"), Value: []byte("hello"), Timestamp: time.UnixMilli(1_700_000_000_000)},
		{Key: []byte("k2"), Value: []byte("world"), Timestamp: time.UnixMilli(1_700_000_000_005)},
	}, record.BatchOptions{Compression: record.ZSTD})
	if err != nil {
		panic(err)
	}
	b.SetBaseOffset(42) // outside the CRC: the batch stays valid
	fmt.Println(b.BaseOffset(), b.LastOffset(), b.NumRecords(), b.Compression(), b.Verify() == nil)

	var it record.Iterator
	for it.Reset(b); it.Next(); {
		r := it.Record()
		fmt.Printf("%d %s=%s\n", r.Offset, r.Key, r.Value)
	}
	if err := it.Err(); err != nil {
		panic(err)
	}
	// Output:
	// 42 43 2 zstd true
	// 42 k1=hello
	// 43 k2=world
}

// ParseBatch frames the first batch in a buffer of batches, as a fetch
// returns them.
func ExampleParseBatch() {
	var buf []byte
	for i := 0; i < 3; i++ {
		var err error
		buf, err = record.AppendBatch(buf, []record.Record{{Value: []byte{byte('a' + i)}}}, record.BatchOptions{})
		if err != nil {
			panic(err)
		}
	}
	for len(buf) > 0 {
		b, n, err := record.ParseBatch(buf)
		if err != nil {
			panic(err)
		}
		recs, _ := b.Records()
		fmt.Printf("%d bytes: %s\n", n, recs[0].Value)
		buf = buf[n:]
	}
	// Output:
	// 69 bytes: a
	// 69 bytes: b
	// 69 bytes: c
}

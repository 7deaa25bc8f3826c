package controller

import (
	"testing"

	"github.com/spoolmq/spool/record"
)

// FuzzParseStable feeds arbitrary bytes to the stable store's file parser.
// Nothing may panic; a file that parses says exactly what it holds: encoding
// what it parsed to gives the same bytes back (so no two files read alike,
// and no damage reads as a value).
func FuzzParseStable(f *testing.F) {
	f.Add(encodeStable(map[string]stableValue{}))
	f.Add(encodeStable(map[string]stableValue{
		"CurrentTerm":  {b: []byte{0, 0, 0, 0, 0, 0, 0, 7}, uint: true},
		"LastVoteCand": {b: []byte("node-2")},
		"":             {b: []byte{}},
		"\x00\"":       {b: []byte{0xff}},
	}))
	f.Add([]byte("spool-raft-stable 1\ncrc32c 00000000\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		vals, err := parseStable(data)
		if err != nil {
			return
		}
		if got := encodeStable(vals); string(got) != string(data) {
			t.Fatalf("parsed %q, which encodes as %q", data, got)
		}
	})
}

// FuzzParseTruncation feeds arbitrary bytes to the truncation file's
// parser, and each batch that parses to the LogStore's decoder: nothing may
// panic, and what parses is a verified batch.
func FuzzParseTruncation(f *testing.F) {
	b, err := encodeBatches(testEntries(1, 4, 2), 1<<20)
	if err != nil {
		f.Fatal(err)
	}
	b[0].batch.SetBaseOffset(0)
	f.Add(truncation{keepStart: 1, kept: b[0].batch}.encode())
	f.Add([]byte{})
	s := &LogStore{}
	s.iters.New = func() any { return new(record.Iterator) }
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := parseTruncation(data)
		if err != nil {
			return
		}
		if err := tr.kept.Verify(); err != nil {
			t.Fatalf("parsed a batch that does not verify: %v", err)
		}
		if tr.keepStart < 0 || tr.keepStart > tr.kept.NextOffset() {
			t.Fatalf("keep start %d outside the batch's [0, %d]", tr.keepStart, tr.kept.NextOffset())
		}
		_, _ = s.decode(tr.kept)
	})
}

// FuzzDecodeEntries feeds arbitrary batch bytes to the decoder of stored
// entries (what GetLog runs on a batch read from disk): nothing may panic,
// and entries that decode have dense indexes from the batch's base.
func FuzzDecodeEntries(f *testing.F) {
	bs, err := encodeBatches(testEntries(5, 12, 3), 1<<20)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(bs[0].batch.Bytes())
	s := &LogStore{}
	s.iters.New = func() any { return new(record.Iterator) }
	f.Fuzz(func(t *testing.T, data []byte) {
		b, _, err := record.ParseBatch(data)
		if err != nil {
			return
		}
		db, err := s.decode(b)
		if err != nil {
			return
		}
		for i, e := range db.entries {
			if e.Index != uint64(b.BaseOffset())+uint64(i)+1 {
				t.Fatalf("entry %d has index %d, batch base %d", i, e.Index, b.BaseOffset())
			}
		}
	})
}

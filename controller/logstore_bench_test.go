package controller

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func benchEntries(from uint64, n, size int) []*raft.Log {
	out := make([]*raft.Log, n)
	for i := range out {
		out[i] = &raft.Log{Index: from + uint64(i), Term: 3, Type: raft.LogCommand,
			Data: make([]byte, size), AppendedAt: time.Now()}
	}
	return out
}

// StoreLogs as a leader (a few entries a call) and a follower (up to
// MaxAppendEntries, 64) call it: one fsync a call, under the Sync policy.
func BenchmarkLogStoreStoreLogs(b *testing.B) {
	for _, n := range []int{1, 64} {
		b.Run(fmt.Sprintf("entries=%d/size=100", n), func(b *testing.B) {
			s, err := OpenLogStore(b.TempDir(), LogStoreOptions{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			b.SetBytes(int64(n * 100))
			b.ReportAllocs()
			next := uint64(1)
			for b.Loop() {
				if err := s.StoreLogs(benchEntries(next, n, 100)); err != nil {
					b.Fatal(err)
				}
				next += uint64(n)
			}
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "entries/s")
		})
	}
}

// GetLog in index order, as replication and the FSM read: entries just
// stored (in the cache), and after a reopen (each batch read and decoded
// once, then served from the cache).
func BenchmarkLogStoreGetLogSequential(b *testing.B) {
	const total = 64 * 1000
	dir := b.TempDir()
	s, err := OpenLogStore(dir, LogStoreOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for i := uint64(1); i <= total; i += 64 {
		if err := s.StoreLogs(benchEntries(i, 64, 100)); err != nil {
			b.Fatal(err)
		}
	}
	read := func(b *testing.B, s *LogStore, from uint64) {
		var e raft.Log
		i := from
		for b.Loop() {
			if err := s.GetLog(i, &e); err != nil {
				b.Fatal(err)
			}
			if i++; i > total {
				i = from
			}
		}
	}
	b.Run("cached", func(b *testing.B) {
		b.ReportAllocs()
		read(b, s, total-cacheBatches*64+1)
	})
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	b.Run("from disk", func(b *testing.B) {
		s, err := OpenLogStore(dir, LogStoreOptions{})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		b.ReportAllocs()
		read(b, s, 1)
	})
}

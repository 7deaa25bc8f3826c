package log

import (
	"math/bits"

	"github.com/cespare/xxhash/v2"
)

// offsetMap maps keys to the latest offset seen for them, in memory fixed
// at creation: an open-addressing table of 24-byte slots (two independent
// 64-bit hashes of the key and an offset), as Kafka's SkimpyOffsetMap. Two
// keys are taken for one only if both hashes collide (about 2^-128).
type offsetMap struct {
	slots []mapSlot // length a power of two
	mask  uint64
	used  int
	limit int // entries allowed: a load factor of 0.9
	seed  *xxhash.Digest

	// aborted are the aborted transactions of the log being cleaned:
	// their records are neither mapped nor kept.
	aborted abortedTxns
}

type mapSlot struct {
	h1, h2 uint64
	off    int64 // offset+1; 0: empty
}

const mapSlotSize = 24

func newOffsetMap(bufferBytes int) *offsetMap {
	n := uint64(1) << (bits.Len64(uint64(bufferBytes/mapSlotSize)) - 1)
	return &offsetMap{
		slots: make([]mapSlot, n),
		mask:  n - 1,
		limit: int(float64(n) * 0.9),
		seed:  xxhash.NewWithSeed(0x9e3779b97f4a7c15),
	}
}

func (m *offsetMap) hash(key []byte) (uint64, uint64) {
	m.seed.ResetWithSeed(0x9e3779b97f4a7c15)
	m.seed.Write(key)
	return xxhash.Sum64(key), m.seed.Sum64()
}

// put records off as key's latest offset. It reports false, changing
// nothing, when the key is new and the map is full.
func (m *offsetMap) put(key []byte, off int64) bool {
	h1, h2 := m.hash(key)
	for i := h1 & m.mask; ; i = (i + 1) & m.mask {
		s := &m.slots[i]
		if s.off == 0 {
			if m.used >= m.limit {
				return false
			}
			*s = mapSlot{h1: h1, h2: h2, off: off + 1}
			m.used++
			return true
		}
		if s.h1 == h1 && s.h2 == h2 {
			if off+1 > s.off {
				s.off = off + 1
			}
			return true
		}
	}
}

// get returns key's latest offset, if the map has the key.
func (m *offsetMap) get(key []byte) (int64, bool) {
	h1, h2 := m.hash(key)
	for i := h1 & m.mask; ; i = (i + 1) & m.mask {
		s := &m.slots[i]
		if s.off == 0 {
			return 0, false
		}
		if s.h1 == h1 && s.h2 == h2 {
			return s.off - 1, true
		}
	}
}

func (m *offsetMap) full() bool { return m.used >= m.limit }

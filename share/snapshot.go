package share

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// A snapshot is what survives a crash of a share-partition: its start and
// each in-flight offset's state and delivery count. An Acquired record is
// saved as Available - its lock dies with the process - with its count,
// so that a poison record still reaches the delivery limit across
// crashes. Layout (big-endian):
//
//	int16 version=0 | int64 start | int32 n | n × (int8 state | uint8 count)
//
// so at most 2 bytes per in-flight record (MaxInFlight bounds n).

// ErrCorruptSnapshot means bytes that are not a snapshot this package
// wrote.
var ErrCorruptSnapshot = errors.New("share: corrupt share-partition snapshot")

// maxSnapshotRecords bounds n when decoding, whatever MaxInFlight says.
const maxSnapshotRecords = 1 << 20

// Snapshot encodes the partition's durable state.
func (p *Partition) Snapshot() []byte {
	b := make([]byte, 0, 14+2*len(p.recs))
	b = binary.BigEndian.AppendUint16(b, 0)
	b = binary.BigEndian.AppendUint64(b, uint64(p.start))
	b = binary.BigEndian.AppendUint32(b, uint32(len(p.recs)))
	for _, r := range p.recs {
		s := r.state
		if s == Acquired {
			s = Available
		}
		b = append(b, byte(s), r.count)
	}
	return b
}

// Restore decodes a snapshot into a share-partition with cfg.
func Restore(cfg Config, b []byte) (*Partition, error) {
	if len(b) < 14 {
		return nil, fmt.Errorf("%w: %d bytes", ErrCorruptSnapshot, len(b))
	}
	if v := binary.BigEndian.Uint16(b); v != 0 {
		return nil, fmt.Errorf("%w: version %d", ErrCorruptSnapshot, v)
	}
	start := int64(binary.BigEndian.Uint64(b[2:]))
	n := binary.BigEndian.Uint32(b[10:])
	// The offsets it covers, start to start+n, must be offsets: past
	// MaxInt64 they would wrap negative once the done prefix is dropped.
	if start < 0 || n > maxSnapshotRecords || len(b) != 14+2*int(n) || start > math.MaxInt64-int64(n) {
		return nil, fmt.Errorf("%w: start %d, %d records in %d bytes", ErrCorruptSnapshot, start, n, len(b))
	}
	p := New(cfg, start)
	p.recs = make([]record, n)
	for i := range p.recs {
		s, c := State(b[14+2*i]), b[15+2*i]
		if s != Available && s != Acknowledged && s != Archived {
			return nil, fmt.Errorf("%w: state %d at offset %d", ErrCorruptSnapshot, s, start+int64(i))
		}
		p.recs[i] = record{state: s, count: c}
	}
	p.advance()
	return p, nil
}

package share

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// State is a record's delivery state in a share-partition (KIP-932).
type State int8

// Record states, with Kafka's codes.
const (
	// Available: may be handed to a consumer.
	Available State = 0
	// Acquired: handed to one consumer, locked until it acknowledges it or
	// the lock expires.
	Acquired State = 1
	// Acknowledged: processed (Accept). Final.
	Acknowledged State = 2
	// Archived: given up on - rejected, delivered too often, or not a
	// record at all (a gap: a transaction marker, a compacted offset).
	// Final.
	Archived State = 4
)

func (s State) String() string {
	switch s {
	case Available:
		return "available"
	case Acquired:
		return "acquired"
	case Acknowledged:
		return "acknowledged"
	case Archived:
		return "archived"
	}
	return fmt.Sprintf("State(%d)", int8(s))
}

// AckType is how a consumer acknowledges a record, with Kafka's codes.
type AckType int8

// Acknowledgement types.
const (
	// Gap archives an offset that holds no record.
	Gap AckType = 0
	// Accept: processed; the record is Acknowledged.
	Accept AckType = 1
	// Release: not processed; the record is Available again (or Archived
	// once delivered DeliveryLimit times).
	Release AckType = 2
	// Reject: not processable; the record is Archived.
	Reject AckType = 3
	// Renew keeps the record Acquired for another lock duration.
	Renew AckType = 4
)

// Errors of a share-partition. Each stands for one Kafka error code.
var (
	// ErrInvalidRecordState (INVALID_RECORD_STATE): an acknowledged offset
	// is not Acquired by the acknowledging member (never delivered to it,
	// acknowledged already, or its lock expired and it went elsewhere).
	ErrInvalidRecordState = errors.New("share: invalid record state")
	// ErrInvalidRequest (INVALID_REQUEST): acknowledgement batches that
	// overlap, are out of order, are empty, or carry the wrong number of
	// types.
	ErrInvalidRequest = errors.New("share: invalid acknowledgement")
)

// Config are a share-partition's limits.
type Config struct {
	// LockDuration is how long an acquired record stays with its consumer
	// unacknowledged (group.share.record.lock.duration.ms). Default 30 s.
	LockDuration time.Duration
	// DeliveryLimit is how many times a record is delivered before it is
	// archived (group.share.delivery.count.limit). Default 5.
	DeliveryLimit int
	// MaxInFlight caps the records between the start offset and the end
	// of what has been acquired (group.share.partition.max.record.locks):
	// past it, nothing new is acquired until the start moves. Default
	// 2000.
	MaxInFlight int
}

// Defaults of Config, Kafka's.
const (
	DefaultLockDuration  = 30 * time.Second
	DefaultDeliveryLimit = 5
	DefaultMaxInFlight   = 2000
)

func (c Config) withDefaults() Config {
	if c.LockDuration <= 0 {
		c.LockDuration = DefaultLockDuration
	}
	if c.DeliveryLimit <= 0 {
		c.DeliveryLimit = DefaultDeliveryLimit
	}
	c.DeliveryLimit = min(c.DeliveryLimit, 255)
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	return c
}

// Partition is one share-partition: the delivery state of a share group's
// records of one topic partition. It does no I/O and is not safe for
// concurrent use; its owner reads the log, persists Snapshot after each
// change that must survive a crash, and serializes calls.
//
// Offsets below Start are done (acknowledged or archived); offsets from
// End up have never been acquired; between them each offset has a state:
//
//	      Start                                End
//	  done  |  A  Q  K  Q  A  X  K  ...           |  never acquired
//	        |<-------- in flight (<= MaxInFlight) -->|
//
//	A available  Q acquired  K acknowledged  X archived
type Partition struct {
	cfg   Config
	start int64
	recs  []record // recs[i] is offset start+i; End is start+len(recs)
}

type record struct {
	state    State
	count    uint8 // deliveries so far
	owner    string
	deadline time.Time
}

// New returns a share-partition that starts at offset start.
func New(cfg Config, start int64) *Partition {
	return &Partition{cfg: cfg.withDefaults(), start: start}
}

// Start is the share-partition start offset (SPSO): every offset below it
// is done.
func (p *Partition) Start() int64 { return p.start }

// End is the share-partition end offset (SPEO): the first offset never
// acquired.
func (p *Partition) End() int64 { return p.start + int64(len(p.recs)) }

// Config is the partition's configuration, defaults filled in.
func (p *Partition) Config() Config { return p.cfg }

// State is an offset's state and how many times it was delivered.
func (p *Partition) State(offset int64) (State, int) {
	switch {
	case offset < p.start:
		return Acknowledged, 0 // done: which final state is forgotten
	case offset >= p.End():
		return Available, 0
	}
	r := p.recs[offset-p.start]
	return r.state, int(r.count)
}

// FetchOffset is where a read of the log should begin to find something
// to acquire: the first Available offset in flight, else End; ok is false
// when there is nothing to acquire (nothing available, and the window is
// full).
func (p *Partition) FetchOffset() (offset int64, ok bool) {
	for i, r := range p.recs {
		if r.state == Available {
			return p.start + int64(i), true
		}
	}
	return p.End(), len(p.recs) < p.cfg.MaxInFlight
}

// Delivery is a record handed to a consumer.
type Delivery struct {
	Offset        int64
	DeliveryCount int
}

// Acquire hands member up to limit of the offsets the log holds, in order,
// locked until now plus the lock duration. present are the offsets of the
// records a read of the log from offset from found, ascending. An offset
// the read passed over holds no record (a transaction marker, a record
// compacted away): at or past End it is archived as a gap, and below End
// one still Available is archived too - it can never be delivered. Offsets
// that are not Available are passed over.
func (p *Partition) Acquire(member string, from int64, present []int64, limit int, now time.Time) []Delivery {
	var out []Delivery
	deadline := now.Add(p.cfg.LockDuration)
	next := from
	for _, off := range present {
		if len(out) >= limit {
			break
		}
		if off < p.start {
			next = off + 1
			continue
		}
		// Offsets the read passed over, below End: gone from the log.
		for o := max(next, p.start); o < min(off, p.End()); o++ {
			if r := &p.recs[o-p.start]; r.state == Available {
				r.state = Archived
			}
		}
		next = off + 1
		if off >= p.End() {
			if off-p.start >= int64(p.cfg.MaxInFlight) {
				break
			}
			for p.End() < off {
				p.recs = append(p.recs, record{state: Archived}) // a gap
			}
			p.recs = append(p.recs, record{})
		}
		r := &p.recs[off-p.start]
		if r.state != Available {
			continue
		}
		r.count++
		r.state, r.owner, r.deadline = Acquired, member, deadline
		out = append(out, Delivery{Offset: off, DeliveryCount: int(r.count)})
	}
	p.advance()
	return out
}

// AckBatch acknowledges the offsets First to Last: with one type for all,
// or one per offset.
type AckBatch struct {
	First, Last int64
	Types       []AckType
}

// Acknowledge applies member's acknowledgements at now, all or none:
// batches must be ascending and disjoint (ErrInvalidRequest) and every
// offset Acquired by member (ErrInvalidRecordState), Gap's included (it
// says an offset delivered to the member held no record). It returns the offsets
// archived because they were rejected or reached the delivery limit.
func (p *Partition) Acknowledge(member string, batches []AckBatch, now time.Time) (archived []Delivery, err error) {
	prev := int64(-1)
	for _, b := range batches {
		n := b.Last - b.First + 1
		switch {
		case b.First < 0 || b.Last < b.First || b.First <= prev:
			return nil, fmt.Errorf("%w: batch %d-%d after %d", ErrInvalidRequest, b.First, b.Last, prev)
		case len(b.Types) != 1 && int64(len(b.Types)) != n:
			return nil, fmt.Errorf("%w: %d types for %d offsets", ErrInvalidRequest, len(b.Types), n)
		}
		prev = b.Last
		for off := b.First; off <= b.Last; off++ {
			t := b.typeOf(off)
			if t < Gap || t > Renew {
				return nil, fmt.Errorf("%w: acknowledgement type %d", ErrInvalidRequest, t)
			}
			if off < p.start || off >= p.End() {
				return nil, fmt.Errorf("%w: offset %d is not in flight (%d-%d)", ErrInvalidRecordState, off, p.start, p.End())
			}
			r := p.recs[off-p.start]
			if r.state != Acquired || r.owner != member {
				return nil, fmt.Errorf("%w: offset %d is %v", ErrInvalidRecordState, off, r.state)
			}
		}
	}
	for _, b := range batches {
		for off := b.First; off <= b.Last; off++ {
			r := &p.recs[off-p.start]
			switch b.typeOf(off) {
			case Gap:
				r.state = Archived
			case Accept:
				r.state = Acknowledged
			case Reject:
				r.state = Archived
				archived = append(archived, Delivery{off, int(r.count)})
			case Release:
				if p.release(r) {
					archived = append(archived, Delivery{off, int(r.count)})
				}
			case Renew:
				r.deadline = now.Add(p.cfg.LockDuration)
				continue
			}
			r.owner, r.deadline = "", time.Time{}
		}
	}
	p.advance()
	return archived, nil
}

func (b AckBatch) typeOf(off int64) AckType {
	if len(b.Types) == 1 {
		return b.Types[0]
	}
	return b.Types[off-b.First]
}

// release makes an acquired record available again, or archives it at
// the delivery limit; whether it archived it.
func (p *Partition) release(r *record) bool {
	r.owner, r.deadline = "", time.Time{}
	if int(r.count) >= p.cfg.DeliveryLimit {
		r.state = Archived
		return true
	}
	r.state = Available
	return false
}

// Expire releases the records whose lock expired by now; it returns those
// archived at the delivery limit.
func (p *Partition) Expire(now time.Time) (archived []Delivery) {
	for i := range p.recs {
		r := &p.recs[i]
		if r.state == Acquired && now.After(r.deadline) && p.release(r) {
			archived = append(archived, Delivery{p.start + int64(i), int(r.count)})
		}
	}
	p.advance()
	return archived
}

// ReleaseMember releases every record member holds (it left, or its
// session ended); it returns those archived at the delivery limit.
func (p *Partition) ReleaseMember(member string) (archived []Delivery) {
	for i := range p.recs {
		r := &p.recs[i]
		if r.state == Acquired && r.owner == member && p.release(r) {
			archived = append(archived, Delivery{p.start + int64(i), int(r.count)})
		}
	}
	p.advance()
	return archived
}

// NextDeadline is the earliest lock deadline, zero without acquired
// records.
func (p *Partition) NextDeadline() time.Time {
	var t time.Time
	for _, r := range p.recs {
		if r.state == Acquired && (t.IsZero() || r.deadline.Before(t)) {
			t = r.deadline
		}
	}
	return t
}

// Reset moves the start to offset, forgetting every state (Kafka's
// AlterShareGroupOffsets).
func (p *Partition) Reset(offset int64) {
	p.start, p.recs = offset, nil
}

// Trim moves the start up to offset, where the log now starts (retention
// removed what was below): the states of offsets from there on are kept,
// so acknowledged records stay done.
func (p *Partition) Trim(offset int64) {
	switch {
	case offset <= p.start:
	case offset >= p.End():
		p.Reset(offset)
	default:
		p.recs = slices.Delete(p.recs, 0, int(offset-p.start))
		p.start = offset
		p.advance()
	}
}

// advance moves the start past the done prefix.
func (p *Partition) advance() {
	i := 0
	for i < len(p.recs) && (p.recs[i].state == Acknowledged || p.recs[i].state == Archived) {
		i++
	}
	if i > 0 {
		p.start += int64(i)
		p.recs = slices.Delete(p.recs, 0, i)
	}
}

// Clone is a copy of the partition, to roll back to.
func (p *Partition) Clone() *Partition {
	return &Partition{cfg: p.cfg, start: p.start, recs: slices.Clone(p.recs)}
}

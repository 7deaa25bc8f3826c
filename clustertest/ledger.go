package clustertest

import (
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Record is a record at its place in a topic's partition: what a producer
// was told (an acknowledgement), or what a consumer or a replica's files
// hold.
type Record struct {
	Partition int32
	Offset    int64
	Value     string
}

func (r Record) String() string { return fmt.Sprintf("%q at %d/%d", r.Value, r.Partition, r.Offset) }

// Ledger keeps what a producer sent to one topic and what the cluster
// acknowledged, to check what is read back against it (Check). Values
// must be unique: the ledger tells records apart by value. It is safe
// for concurrent use by the producer's callbacks.
type Ledger struct {
	mu    sync.Mutex
	sent  map[string]bool
	acked map[string]Record
	at    map[place]string // the value acknowledged at each place
	// conflicts are acknowledgements that contradict the ones before:
	// a value acknowledged twice, two values at one offset.
	conflicts []string
}

// place is a partition and an offset.
type place struct {
	partition int32
	offset    int64
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{sent: map[string]bool{}, acked: map[string]Record{}, at: map[place]string{}}
}

// Send records that a value is about to be produced. Call it before
// producing: a record read back whose value was never sent is a problem.
func (l *Ledger) Send(value string) {
	l.mu.Lock()
	l.sent[value] = true
	l.mu.Unlock()
}

// Ack records that the cluster acknowledged r.Value at r's partition and
// offset (the producer's promise returned no error).
func (l *Ledger) Ack(r Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.sent[r.Value] {
		l.conflicts = append(l.conflicts, fmt.Sprintf("%v acknowledged but never sent", r))
	}
	if prev, ok := l.acked[r.Value]; ok {
		l.conflicts = append(l.conflicts, fmt.Sprintf("%q acknowledged twice: at %d/%d and %d/%d", r.Value, prev.Partition, prev.Offset, r.Partition, r.Offset))
		return
	}
	l.acked[r.Value] = r
	// Two values acknowledged at one offset: the first was overwritten
	// after its acknowledgement (a leader that lost it, and a new one
	// that gave its offset to another record).
	if prev, ok := l.at[place{r.Partition, r.Offset}]; ok {
		l.conflicts = append(l.conflicts, fmt.Sprintf("%d/%d acknowledged for two values: %q and %q", r.Partition, r.Offset, prev, r.Value))
		return
	}
	l.at[place{r.Partition, r.Offset}] = r.Value
}

// WasSent reports whether a value was sent.
func (l *Ledger) WasSent(value string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent[value]
}

// Sent is how many values were sent.
func (l *Ledger) Sent() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.sent)
}

// Acked is how many values were acknowledged.
func (l *Ledger) Acked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// AckedRecords returns the acknowledged records, by partition and offset.
func (l *Ledger) AckedRecords() []Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Record, 0, len(l.acked))
	for _, r := range l.acked {
		out = append(out, r)
	}
	slices.SortFunc(out, compareRecords)
	return out
}

func compareRecords(a, b Record) int {
	if a.Partition != b.Partition {
		return int(a.Partition - b.Partition)
	}
	switch {
	case a.Offset < b.Offset:
		return -1
	case a.Offset > b.Offset:
		return 1
	}
	return strings.Compare(a.Value, b.Value)
}

// Report is what Check found. Only Unacked may be non-zero in a correct
// run: a record whose acknowledgement the producer never got (its
// connection died, it gave up) may or may not have been written.
type Report struct {
	Read    int // records read
	Acked   int // values acknowledged
	Unacked int // values read that were sent but never acknowledged
	// Lost are acknowledged records never read, where they were
	// acknowledged.
	Lost []Record
	// Moved are acknowledged records read at another place: each pair is
	// the acknowledgement and the reading.
	Moved [][2]Record
	// Duplicates are the second and later readings of a value.
	Duplicates []Record
	// Unknown are records whose value was never sent.
	Unknown []Record
	// Misordered are records whose offset is not the one after the
	// previous record's in their partition: a gap or a step back.
	Misordered []Record
	// Conflicts are acknowledgements that contradict each other: a value
	// acknowledged twice or without being sent, two values acknowledged
	// at one offset.
	Conflicts []string

	// The checks of a whole run (Workload.Verify) add these.

	// CommitsObserved counts the times the group's committed offsets were
	// read while the run went on; CommitsBackwards are the observations
	// of a committed offset lower than one observed before.
	CommitsObserved  int
	CommitsBackwards []string
	// NotConsumed are acknowledged records the consumer group never
	// handed its members, though it committed past them.
	NotConsumed []Record
	// Diverged describes replicas of a partition that are not
	// byte-identical once the cluster has healed and converged, or that
	// do not hold what was read.
	Diverged []string
}

// OK reports whether the check found no problem.
func (r *Report) OK() bool {
	return len(r.Lost)+len(r.Moved)+len(r.Duplicates)+len(r.Unknown)+len(r.Misordered)+len(r.Conflicts)+
		len(r.CommitsBackwards)+len(r.NotConsumed)+len(r.Diverged) == 0
}

// maxListed is how many of each kind of problem String shows.
const maxListed = 10

// String summarises the report: the counts, then the first few problems
// of each kind.
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "read %d records; %d acknowledged, %d read unacknowledged; lost %d, moved %d, duplicated %d, unknown %d, misordered %d, conflicting acks %d",
		r.Read, r.Acked, r.Unacked, len(r.Lost), len(r.Moved), len(r.Duplicates), len(r.Unknown), len(r.Misordered), len(r.Conflicts))
	if r.CommitsObserved > 0 {
		fmt.Fprintf(&b, "; group commits observed %d times", r.CommitsObserved)
	}
	if n := len(r.CommitsBackwards) + len(r.NotConsumed) + len(r.Diverged); n > 0 {
		fmt.Fprintf(&b, "; group commits backwards %d, not consumed %d, replica divergences %d",
			len(r.CommitsBackwards), len(r.NotConsumed), len(r.Diverged))
	}
	list := func(name string, n int, item func(int) string) {
		for i := range min(n, maxListed) {
			fmt.Fprintf(&b, "\n  %s: %s", name, item(i))
		}
		if n > maxListed {
			fmt.Fprintf(&b, "\n  %s: ... %d more", name, n-maxListed)
		}
	}
	list("lost", len(r.Lost), func(i int) string { return r.Lost[i].String() })
	list("moved", len(r.Moved), func(i int) string {
		return fmt.Sprintf("acknowledged %v, read %v", r.Moved[i][0], r.Moved[i][1])
	})
	list("duplicate", len(r.Duplicates), func(i int) string { return r.Duplicates[i].String() })
	list("unknown", len(r.Unknown), func(i int) string { return r.Unknown[i].String() })
	list("misordered", len(r.Misordered), func(i int) string { return r.Misordered[i].String() })
	list("conflict", len(r.Conflicts), func(i int) string { return r.Conflicts[i] })
	list("commit backwards", len(r.CommitsBackwards), func(i int) string { return r.CommitsBackwards[i] })
	list("not consumed", len(r.NotConsumed), func(i int) string { return r.NotConsumed[i].String() })
	list("diverged", len(r.Diverged), func(i int) string { return r.Diverged[i] })
	return b.String()
}

// Check checks records read back from the topic against the ledger: every
// acknowledged record read exactly once, at the partition and offset it
// was acknowledged at; no value read that was never sent; and, within each
// partition, offsets dense and increasing in the order given (read each
// partition from its start, in order; partitions may interleave).
func (l *Ledger) Check(read []Record) *Report {
	l.mu.Lock()
	defer l.mu.Unlock()
	rep := &Report{Read: len(read), Acked: len(l.acked), Conflicts: slices.Clone(l.conflicts)}
	seen := map[string]bool{}
	last := map[int32]int64{}
	for _, r := range read {
		if prev, ok := last[r.Partition]; ok && r.Offset != prev+1 {
			rep.Misordered = append(rep.Misordered, r)
		}
		last[r.Partition] = r.Offset
		if seen[r.Value] {
			rep.Duplicates = append(rep.Duplicates, r)
			continue
		}
		seen[r.Value] = true
		if !l.sent[r.Value] {
			rep.Unknown = append(rep.Unknown, r)
			continue
		}
		a, ok := l.acked[r.Value]
		switch {
		case !ok:
			rep.Unacked++
		case a != r:
			rep.Moved = append(rep.Moved, [2]Record{a, r})
		}
	}
	for v, a := range l.acked {
		if !seen[v] {
			rep.Lost = append(rep.Lost, a)
		}
	}
	slices.SortFunc(rep.Lost, compareRecords)
	return rep
}

// Groups shows a consumer group sharing a topic's partitions. Three
// consumers join the group "billing" to read the six partitions of
// "events"; the group gives each two (the rebalance callbacks OnAssigned
// and OnRevoked print who gets what). A producer writes keyed records and
// each consumer reads only its partitions. Then one consumer leaves (Close
// commits its positions and leaves the group): the group rebalances, the
// two left take over its partitions from the committed offsets, and every
// record is consumed at least once. Finally the group's committed offsets
// are checked against the end of each partition.
//
//	go run ./examples/groups            # in a fresh temporary directory
//	go run ./examples/groups -data dir  # in dir
//
// Sessions and heartbeats are short (a 1 s session timeout, which the
// broker allows through Options.GroupMinSessionTimeout) so the example
// finishes in a second or two; Kafka's defaults are 45 s and 3 s.
// The program exits 1 if a record is never consumed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spoolmq/spool"
)

const (
	topic      = "events"
	groupName  = "billing"
	partitions = 6
	consumers  = 3
	perRound   = 600 // records produced in each round
)

func main() {
	data := flag.String("data", "", "data directory (default: a new temporary directory)")
	flag.Parse()
	if err := run(*data); err != nil {
		fmt.Fprintln(os.Stderr, "groups:", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	if dir == "" {
		tmp, err := os.MkdirTemp("", "spool-groups-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	ctx := context.Background()

	b, err := spool.Open(dir, spool.Options{
		// Allow the short session timeout the consumers ask for.
		GroupMinSessionTimeout: 100 * time.Millisecond,
		// Let the three consumers gather before the first generation
		// forms, so the first assignment already spreads the partitions
		// (Kafka's group.initial.rebalance.delay.ms).
		GroupInitialRebalanceDelay: 300 * time.Millisecond,
	})
	if err != nil {
		return err
	}
	defer b.Close()
	err = b.CreateTopic(ctx, topic, spool.TopicConfig{Partitions: partitions})
	if err != nil && !errors.Is(err, spool.ErrTopicExists) { // -data: a second run
		return err
	}
	fmt.Printf("broker in %s, topic %s with %d partitions\n", dir, topic, partitions)

	seen := newTally()
	var ms []*member
	for i := range consumers {
		m, err := startMember(b, fmt.Sprintf("consumer-%d", i+1), seen)
		if err != nil {
			return err
		}
		ms = append(ms, m)
	}
	defer func() {
		for _, m := range ms {
			m.close()
		}
	}()
	if err := waitFor("every partition to be assigned", func() bool { return owned(ms) == partitions }); err != nil {
		return err
	}

	// Round 1: all three consume.
	if err := produce(ctx, b, 1); err != nil {
		return err
	}
	if err := waitFor("round 1 to be consumed", func() bool { return seen.unique() == perRound }); err != nil {
		return err
	}
	fmt.Printf("round 1: %d records produced, consumed by:\n", perRound)
	report(ms)

	// consumer-3 leaves: Close commits what it consumed and leaves the
	// group, whose other members rebalance at their next Poll.
	leaving := ms[len(ms)-1]
	ms = ms[:len(ms)-1]
	fmt.Printf("%s leaves the group\n", leaving.name)
	if err := leaving.close(); err != nil {
		return err
	}
	if err := waitFor("the others to take over", func() bool { return owned(ms) == partitions }); err != nil {
		return err
	}

	// Round 2: the two left consume everything.
	if err := produce(ctx, b, 2); err != nil {
		return err
	}
	if err := waitFor("round 2 to be consumed", func() bool { return seen.unique() == 2*perRound }); err != nil {
		return err
	}
	fmt.Printf("round 2: %d more records produced, consumed by:\n", perRound)
	report(ms)

	// Every member leaves, committing its positions: the group is Empty
	// and its committed offsets are the end of every partition.
	fmt.Println("the others leave")
	for _, m := range ms {
		if err := m.close(); err != nil {
			return err
		}
	}
	ms = nil
	total, dups := seen.unique(), seen.duplicates()
	fmt.Printf("total: %d records produced, %d consumed at least once, %d redelivered\n", 2*perRound, total, dups)
	if total != 2*perRound {
		return fmt.Errorf("%d records were never consumed", 2*perRound-total)
	}
	return checkCommitted(b)
}

// member is a group consumer polling in its own goroutine.
type member struct {
	name   string
	c      *spool.Consumer
	cancel context.CancelFunc
	done   chan struct{}
	err    error // Poll's, once done is closed

	mu       sync.Mutex
	owns     []spool.TopicPartition
	consumed int // records Poll returned
	reported int // consumed at the last report
	closed   bool
}

// startMember creates a consumer in the group and polls it until closed.
// Each record consumed is counted by the member and in seen.
func startMember(b *spool.Broker, name string, seen *tally) (*member, error) {
	m := &member{name: name, done: make(chan struct{})}
	c, err := b.NewConsumer(spool.ConsumerConfig{
		Group:              groupName,
		Topics:             []string{topic},
		AutoOffsetReset:    spool.ResetEarliest,
		SessionTimeout:     time.Second,
		HeartbeatInterval:  100 * time.Millisecond,
		AutoCommitInterval: 100 * time.Millisecond,
		FetchMaxWait:       50 * time.Millisecond,
		// Both callbacks run inside Poll, on this member's goroutine.
		OnAssigned: func(tps []spool.TopicPartition) {
			m.mu.Lock()
			m.owns = append(m.owns, tps...)
			slices.SortFunc(m.owns, comparePartitions)
			m.mu.Unlock()
			fmt.Printf("  %s assigned %s\n", name, partitionList(tps))
		},
		OnRevoked: func(tps []spool.TopicPartition) {
			m.mu.Lock()
			m.owns = slices.DeleteFunc(m.owns, func(tp spool.TopicPartition) bool { return slices.Contains(tps, tp) })
			m.mu.Unlock()
			fmt.Printf("  %s revoked  %s\n", name, partitionList(tps))
		},
	})
	if err != nil {
		return nil, err
	}
	m.c = c
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	go func() {
		defer close(m.done)
		for {
			recs, err := c.Poll(ctx)
			if err != nil {
				if ctx.Err() == nil {
					m.err = err
				}
				return
			}
			m.mu.Lock()
			m.consumed += len(recs)
			m.mu.Unlock()
			for _, r := range recs {
				seen.add(r.Partition, r.Offset)
			}
		}
	}()
	return m, nil
}

// close stops the member's polling and closes its consumer, which commits
// its positions and leaves the group.
func (m *member) close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	m.mu.Unlock()
	m.cancel()
	<-m.done
	return errors.Join(m.err, m.c.Close())
}

// owned counts the partitions the members own; it equals the partition
// count once a rebalance has settled.
func owned(ms []*member) int {
	n := 0
	for _, m := range ms {
		m.mu.Lock()
		n += len(m.owns)
		m.mu.Unlock()
	}
	return n
}

// report prints what each member owns and has consumed since the last
// report.
func report(ms []*member) {
	for _, m := range ms {
		m.mu.Lock()
		fmt.Printf("  %s owns %-29s consumed %3d records\n", m.name, partitionList(m.owns), m.consumed-m.reported)
		m.reported = m.consumed
		m.mu.Unlock()
	}
}

// produce writes perRound keyed records: a key's records all go to one
// partition, so each is consumed by one member, in order.
func produce(ctx context.Context, b *spool.Broker, round int) error {
	p, err := b.NewProducer(spool.ProducerConfig{})
	if err != nil {
		return err
	}
	var mu sync.Mutex
	var errs []error
	for i := range perRound {
		rec := spool.Record{
			Topic: topic,
			Key:   fmt.Appendf(nil, "user-%d", i%50),
			Value: fmt.Appendf(nil, "round %d event %d", round, i),
		}
		p.Produce(ctx, rec, func(_ spool.RecordMetadata, err error) {
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	err = p.Close() // flushes
	mu.Lock()
	defer mu.Unlock()
	return errors.Join(append(errs, err)...)
}

// checkCommitted compares the group's committed offsets with the end of
// each partition: a group that consumed everything and committed has no
// lag.
func checkCommitted(b *spool.Broker) error {
	committed, err := b.Groups().FetchOffsets(groupName, nil)
	if err != nil {
		return err
	}
	d, err := b.Groups().Describe(groupName)
	if err != nil {
		return err
	}
	var lag int64
	for i := range int32(partitions) {
		p, err := b.Partition(topic, i)
		if err != nil {
			return err
		}
		lag += p.HighWatermark() - committed[spool.TopicPartition{Topic: topic, Partition: i}].Offset
	}
	fmt.Printf("group %s is %s; committed offsets of %d partitions, total lag %d\n", groupName, d.State, len(committed), lag)
	if lag != 0 {
		return fmt.Errorf("group %s has a lag of %d after consuming everything", groupName, lag)
	}
	return nil
}

// tally records which offsets of which partitions have been consumed.
type tally struct {
	mu   sync.Mutex
	seen map[int32]map[int64]int
	dups int
}

func newTally() *tally { return &tally{seen: map[int32]map[int64]int{}} }

func (t *tally) add(partition int32, offset int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.seen[partition] == nil {
		t.seen[partition] = map[int64]int{}
	}
	if t.seen[partition][offset] > 0 {
		t.dups++
	}
	t.seen[partition][offset]++
}

// unique is the number of distinct records consumed.
func (t *tally) unique() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, offsets := range t.seen {
		n += len(offsets)
	}
	return n
}

// duplicates is the number of records consumed more than once.
func (t *tally) duplicates() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.dups
}

// waitFor polls cond until it holds, for up to 10 seconds.
func waitFor(what string, cond func() bool) error {
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

func comparePartitions(a, b spool.TopicPartition) int { return int(a.Partition) - int(b.Partition) }

// partitionList formats partitions as "events-0,events-1".
func partitionList(tps []spool.TopicPartition) string {
	tps = slices.SortedFunc(slices.Values(tps), comparePartitions)
	s := make([]string, len(tps))
	for i, tp := range tps {
		s[i] = tp.String()
	}
	return strings.Join(s, ",")
}

// Package kafkabench measures spool's Kafka protocol server against
// franz-go's fake Kafka broker, kfake, with the same Kafka client on both:
// franz-go's kgo, in the same process, over loopback TCP.
//
// The systems:
//
//   - spool: a spool.Broker opened with the log.None flush policy (the
//     records go to the page cache and are never fsynced, Kafka's default
//     too), served by transport.Server - what `spool serve` runs.
//   - kfake: github.com/twmb/franz-go/pkg/kfake, one broker, without a
//     DataDir: it keeps every record in memory.
//   - kfake-disk: kfake with a DataDir (and without SyncWrites): it writes
//     segment files to the page cache like spool under log.None.
//
// No system waits for a disk, so the comparison is of the protocol servers
// and their in-memory (page cache) data paths, not of storage. All run
// inside this process, sharing its CPUs with the client.
//
// The workloads (Produce, Consume, Latency) use kgo with its defaults -
// acks=all, idempotent writes, linger 10 ms, the uniform-bytes partitioner,
// 50,000 buffered records - except that compression is off (the values are
// random letters, which snappy, kgo's default, hardly shrinks, so it would
// only spend the client's CPU, the same on both sides), and that Produce
// can ask for acks=1, which kgo allows only without idempotence.
package kafkabench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/transport"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Systems are the names Start knows.
var Systems = []string{"spool", "kfake", "kfake-disk"}

// Target is a running broker of one system.
type Target struct {
	Name string
	Addr string
	stop func() error
}

// Start starts a broker of the named system. dir is its data directory
// (kfake, in memory, ignores it).
func Start(name, dir string) (*Target, error) {
	switch name {
	case "spool":
		return startSpool(dir)
	case "kfake":
		return startKfake()
	case "kfake-disk":
		return startKfake(kfake.DataDir(dir))
	}
	return nil, fmt.Errorf("kafkabench: unknown system %q", name)
}

func startSpool(dir string) (*Target, error) {
	b, err := spool.Open(dir, spool.Options{Flush: log.None, AutoCreateTopics: spool.Disabled})
	if err != nil {
		return nil, err
	}
	s, err := transport.NewServer(b, transport.Options{})
	if err != nil {
		return nil, errors.Join(err, b.Close())
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, errors.Join(err, b.Close())
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	return &Target{Name: "spool", Addr: l.Addr().String(), stop: func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := s.Shutdown(ctx)
		if serr := <-served; !errors.Is(serr, transport.ErrServerClosed) {
			err = errors.Join(err, serr)
		}
		return errors.Join(err, b.Close())
	}}, nil
}

func startKfake(opts ...kfake.Opt) (*Target, error) {
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.ListenFn(func(network, _ string) (net.Listener, error) {
		return net.Listen(network, "127.0.0.1:0")
	})}, opts...)...)
	if err != nil {
		return nil, err
	}
	return &Target{Name: "kfake", Addr: c.ListenAddrs()[0], stop: func() error {
		c.Close()
		return nil
	}}, nil
}

// Close stops the broker.
func (t *Target) Close() error { return t.stop() }

// client is a kgo client of the target with the benchmark's settings.
func (t *Target) client(opts ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(t.Addr),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
	}, opts...)...)
}

// CreateTopic creates a topic of the given partitions (replication factor
// 1) with a CreateTopics request.
func (t *Target) CreateTopic(ctx context.Context, topic string, partitions int32) error {
	cl, err := t.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 10_000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, partitions, 1
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	if code := resp.Topics[0].ErrorCode; code != 0 {
		return fmt.Errorf("create topic %s: error %d", topic, code)
	}
	return nil
}

// DefaultLinger is kgo's default linger (ProducerLinger).
const DefaultLinger = 10 * time.Millisecond

// Values makes record values: size bytes of random letters, the first 8
// carrying the record's index (big-endian), the next 8 a timestamp where
// the latency workload needs one.
type Values struct {
	base []byte
}

// NewValues returns the values of size bytes (at least 16).
func NewValues(size int) *Values {
	rng := rand.New(rand.NewPCG(uint64(size), 11))
	v := make([]byte, max(size, 16))
	for i := range v {
		v[i] = byte('a' + rng.IntN(26))
	}
	return &Values{base: v}
}

// Value returns record i's value, newly allocated.
func (s *Values) Value(i int) []byte {
	v := slices.Clone(s.base)
	binary.BigEndian.PutUint64(v, uint64(i))
	return v
}

// Acks are the producer acknowledgement settings Produce takes.
type Acks int

const (
	// AcksAll is acks=all with idempotent writes, kgo's default.
	AcksAll Acks = -1
	// AcksLeader is acks=1; kgo then needs idempotence off.
	AcksLeader Acks = 1
)

// String returns the setting as Kafka's producer config spells it.
func (a Acks) String() string {
	if a == AcksAll {
		return "all"
	}
	return fmt.Sprint(int(a))
}

func (a Acks) opts() []kgo.Opt {
	if a == AcksLeader {
		return []kgo.Opt{kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite()}
	}
	return nil
}

// Produce produces n records of size bytes to topic with the given acks
// and waits until all are acknowledged; it returns the time from the first
// Produce call to the last acknowledgement.
func Produce(ctx context.Context, t *Target, topic string, n, size int, acks Acks) (time.Duration, error) {
	cl, err := t.client(append(acks.opts(), kgo.DefaultProduceTopic(topic))...)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	// Warm the connection and metadata: not timed.
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("warm-up")}).FirstErr(); err != nil {
		return 0, fmt.Errorf("warm-up produce: %w", err)
	}
	vals := NewValues(size)
	var failed atomic.Pointer[error]
	var acked atomic.Int64
	cb := func(_ *kgo.Record, err error) {
		if err != nil {
			failed.CompareAndSwap(nil, &err)
		}
		acked.Add(1)
	}
	start := time.Now()
	for i := range n {
		cl.Produce(ctx, &kgo.Record{Value: vals.Value(i)}, cb)
	}
	if err := cl.Flush(ctx); err != nil {
		return 0, err
	}
	took := time.Since(start)
	if p := failed.Load(); p != nil {
		return 0, *p
	}
	if got := acked.Load(); got != int64(n) {
		return 0, fmt.Errorf("%d of %d records acknowledged", got, n)
	}
	return took, nil
}

// Consume reads n records from the start of every partition of topic with
// a new client (no group) and returns the time from creating the client to
// the last record. Records must have been produced by Produce after one
// warm-up record: it checks each partition's values are Produce's, in
// order, of size bytes. opts are further client options (an isolation
// level, say).
func Consume(ctx context.Context, t *Target, topic string, n, size int, opts ...kgo.Opt) (time.Duration, error) {
	start := time.Now()
	cl, err := t.client(append([]kgo.Opt{kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, opts...)...)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	last := map[int32]int64{} // partition -> last index read
	read := 0
	want := n + 1 // and the warm-up record
	for read < want {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("after %d of %d records: %w", read, want, err)
		}
		if fs.IsClientClosed() {
			return 0, kgo.ErrClientClosed
		}
		var ferr error
		fs.EachError(func(topic string, p int32, err error) { ferr = fmt.Errorf("%s/%d: %w", topic, p, err) })
		if ferr != nil {
			return 0, ferr
		}
		var verr error
		fs.EachRecord(func(r *kgo.Record) {
			read++
			if verr != nil || string(r.Value) == "warm-up" {
				return
			}
			if len(r.Value) != size {
				verr = fmt.Errorf("offset %d: value of %d bytes, want %d", r.Offset, len(r.Value), size)
				return
			}
			i := int64(binary.BigEndian.Uint64(r.Value))
			if prev, ok := last[r.Partition]; ok && i <= prev {
				verr = fmt.Errorf("partition %d: record %d after %d", r.Partition, i, prev)
			}
			last[r.Partition] = i
		})
		if verr != nil {
			return 0, verr
		}
	}
	took := time.Since(start)
	if read != want {
		return 0, fmt.Errorf("read %d records, want %d", read, want)
	}
	return took, nil
}

// LatencyResult is what one Latency run measured.
type LatencyResult struct {
	Latencies []time.Duration // produce call to the consumer's poll returning it, sorted
	Acks      []time.Duration // produce call to the acknowledgement, sorted
	Achieved  float64         // records/s the producer kept up
}

// Percentile returns the p-quantile (0..1) of sorted durations.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}

// Latency produces n records of size bytes to topic (one partition is
// expected) at rate records/s with the producer lingering linger (kgo's
// default is 10 ms) and waiting for acks, each value stamped with the time
// of its Produce call, while a consumer client polls the topic; a record's
// latency is the time the consumer's poll returned it minus its stamp.
func Latency(ctx context.Context, t *Target, topic string, n, size int, rate float64, linger time.Duration, acks Acks) (LatencyResult, error) {
	var res LatencyResult
	cons, err := t.client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return res, err
	}
	defer cons.Close()
	prod, err := t.client(append(acks.opts(), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(linger))...)
	if err != nil {
		return res, err
	}
	defer prod.Close()
	// Warm both: the producer's id and connection, the consumer's fetch
	// position.
	if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte("warm-up")}).FirstErr(); err != nil {
		return res, fmt.Errorf("warm-up produce: %w", err)
	}
	for got := 0; got == 0; {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if fs.IsClientClosed() {
			return res, kgo.ErrClientClosed
		}
		got = fs.NumRecords()
	}

	type consumed struct {
		lat []time.Duration
		err error
	}
	done := make(chan consumed, 1)
	go func() {
		lat := make([]time.Duration, 0, n)
		for len(lat) < n {
			fs := cons.PollFetches(ctx)
			now := time.Now()
			if err := ctx.Err(); err != nil {
				done <- consumed{err: fmt.Errorf("consumer after %d of %d records: %w", len(lat), n, err)}
				return
			}
			if fs.IsClientClosed() {
				done <- consumed{err: kgo.ErrClientClosed}
				return
			}
			fs.EachRecord(func(r *kgo.Record) {
				if len(r.Value) >= 16 {
					lat = append(lat, now.Sub(time.Unix(0, int64(binary.BigEndian.Uint64(r.Value[8:])))))
				}
			})
		}
		done <- consumed{lat: lat}
	}()

	vals := NewValues(size)
	var mu sync.Mutex
	acked := make([]time.Duration, 0, n)
	var failed atomic.Pointer[error]
	start := time.Now()
	interval := time.Duration(float64(time.Second) / rate)
	for i := range n {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		v := vals.Value(i)
		sent := time.Now()
		binary.BigEndian.PutUint64(v[8:], uint64(sent.UnixNano()))
		prod.Produce(ctx, &kgo.Record{Value: v}, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.CompareAndSwap(nil, &err)
			}
			d := time.Since(sent)
			mu.Lock()
			acked = append(acked, d)
			mu.Unlock()
		})
	}
	if err := prod.Flush(ctx); err != nil {
		return res, err
	}
	res.Achieved = float64(n) / time.Since(start).Seconds()
	if p := failed.Load(); p != nil {
		return res, *p
	}
	c := <-done
	if c.err != nil {
		return res, c.err
	}
	slices.Sort(c.lat)
	slices.Sort(acked)
	res.Latencies, res.Acks = c.lat, acked
	return res, nil
}

// Remote is a Target for a broker of the named system already listening
// at addr, in another process: Close does nothing (the caller stops the
// process).
func Remote(name, addr string) *Target {
	return &Target{Name: name, Addr: addr, stop: func() error { return nil }}
}

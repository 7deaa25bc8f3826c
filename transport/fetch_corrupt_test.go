package transport

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/partition"
	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/segment"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// damageBatch changes the last byte of the batch holding offset in a
// partition's .log file, in place, as bit rot or a stray write would: the
// batch still frames, its CRC-32C no longer matches. The server has the
// file open; the change reaches it through the page cache.
func damageBatch(t *testing.T, b *spool.Broker, topic string, part int32, offset int64) {
	t.Helper()
	p, err := b.Partition(topic, part)
	require.NoError(t, err)
	paths, err := filepath.Glob(filepath.Join(p.Dir(), "*"+segment.LogSuffix))
	require.NoError(t, err)
	for _, path := range paths {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		for pos := 0; pos < len(data); {
			b, size, err := record.ParseBatch(data[pos:])
			require.NoError(t, err)
			if b.BaseOffset() <= offset && offset <= b.LastOffset() {
				f, err := os.OpenFile(path, os.O_WRONLY, 0)
				require.NoError(t, err)
				_, err = f.WriteAt([]byte{data[pos+size-1] ^ 0x20}, int64(pos+size-1))
				require.NoError(t, err)
				require.NoError(t, f.Close())
				return
			}
			pos += size
		}
	}
	t.Fatalf("no batch holds offset %d", offset)
}

// A client that checks no CRC (librdkafka's default, so kcat) must never
// receive damaged bytes: a fetch from before the damaged batch gets the
// batches before it, one at it gets CORRUPT_MESSAGE and no bytes, one
// past it gets the data after it - in the zero-copy versions, flexible or
// not, and in the down-converted ones.
func TestFetchNeverSendsDamagedBatch(t *testing.T) {
	br, _, addr := testServer(t, fetchOpts, Options{})
	const topic = "damaged"
	fetchCreate(t, br, topic, 2)
	fetchAppend(t, br, topic, 0, 20, 5, 100) // offsets 0..99, batches of 5
	fetchAppend(t, br, topic, 1, 4, 5, 100)
	damageBatch(t, br, topic, 0, 52) // the batch of offsets 50..54
	c := fetchDial(t, addr)

	for _, v := range []int16{4, 11, 12} {
		resp := fetchDo[*kmsg.FetchResponse](t, c, v, fetchReq(0, 1, 1<<20, topic, map[int32]int64{0: 10}, 1<<20))
		rp := resp.Topics[0].Partitions[0]
		require.Equal(t, errNone, rp.ErrorCode, "v%d", v)
		batches := batchesOf(t, rp.RecordBatches) // each verifies
		require.NotEmpty(t, batches)
		require.EqualValues(t, 10, batches[0].BaseOffset(), "v%d", v)
		require.EqualValues(t, 50, batches[len(batches)-1].NextOffset(), "v%d: the batches before the damaged one, no more", v)
		require.EqualValues(t, 100, rp.HighWatermark)

		for _, at := range []int64{50, 52, 54} {
			resp = fetchDo[*kmsg.FetchResponse](t, c, v, fetchReq(0, 1, 1<<20, topic, map[int32]int64{0: at, 1: 0}, 1<<20))
			rp = resp.Topics[0].Partitions[0]
			require.Equal(t, errCorruptMessage, rp.ErrorCode, "v%d at %d", v, at)
			require.Empty(t, rp.RecordBatches)
			require.EqualValues(t, -1, rp.HighWatermark)
			// The other partition of the same request is served.
			other := resp.Topics[0].Partitions[1]
			require.Equal(t, errNone, other.ErrorCode)
			require.Len(t, batchesOf(t, other.RecordBatches), 4)
		}

		resp = fetchDo[*kmsg.FetchResponse](t, c, v, fetchReq(0, 1, 1<<20, topic, map[int32]int64{0: 55}, 1<<20))
		rp = resp.Topics[0].Partitions[0]
		require.Equal(t, errNone, rp.ErrorCode, "past the damaged batch")
		batches = batchesOf(t, rp.RecordBatches)
		require.EqualValues(t, 55, batches[0].BaseOffset())
		require.EqualValues(t, 100, batches[len(batches)-1].NextOffset())
	}

	// Down-converted (v3, message format 1): the records before the damaged
	// batch, then the error.
	rp, recs := legacyFetch(t, addr, 3, topic, 10, 1<<20)
	require.Equal(t, errNone, rp.ErrorCode)
	require.NotEmpty(t, recs)
	for i, r := range recs {
		require.EqualValues(t, 10+i, r.Offset)
		require.Less(t, r.Offset, int64(50))
		require.Equal(t, fetchValue(topic, 0, r.Offset, 100), r.Value)
	}
	rp, recs = legacyFetch(t, addr, 3, topic, 45, 1<<20)
	require.Equal(t, errNone, rp.ErrorCode)
	require.NotEmpty(t, recs) // no more than 45..49: the conversion fits in the bytes read
	for i, r := range recs {
		require.EqualValues(t, 45+i, r.Offset)
		require.Less(t, r.Offset, int64(50))
	}
	rp, recs = legacyFetch(t, addr, 3, topic, 50, 1<<20)
	require.Equal(t, errCorruptMessage, rp.ErrorCode)
	require.Empty(t, recs)

	// Found many times, counted (and logged) once.
	p, err := br.Partition(topic, 0)
	require.NoError(t, err)
	require.EqualValues(t, 1, p.Log().Stats().CorruptBatches)
	d, err := br.DescribeTopic(topic)
	require.NoError(t, err)
	require.EqualValues(t, 1, d.Partitions[0].CorruptBatches)
	require.Zero(t, d.Partitions[1].CorruptBatches)
	require.Zero(t, fetchSpansHeld.Load(), "every segment reference released")
}

// fetchCounter counts the Fetch requests a kgo client sends.
type fetchCounter struct{ n *atomic.Int64 }

func (h fetchCounter) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, _ error) {
	if key == int16(kmsg.Fetch) {
		h.n.Add(1)
	}
}

// franz-go checks CRCs itself: given the damaged batch, it failed the
// partition and fetched the same batch again at once, about 3,000 times a
// second, for as long as the application polled (issue 17). Given
// CORRUPT_MESSAGE instead it gets every record before the damage, then
// backs off: over a poll loop of two seconds it sends a handful of fetches,
// not thousands; and with KeepRetryableFetchErrors it surfaces the error.
func TestFetchDamagedBatchStopsFranzGo(t *testing.T) {
	br, _, addr := testServer(t, fetchOpts, Options{})
	const topic = "damaged-kgo"
	fetchCreate(t, br, topic, 1)
	fetchAppend(t, br, topic, 0, 20, 5, 100)
	damageBatch(t, br, topic, 0, 50)

	var fetches atomic.Int64
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(0)}}),
		kgo.WithHooks(fetchCounter{&fetches}))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []int64
	for len(got) < 50 {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "got %d records", len(got))
		fs.EachRecord(func(r *kgo.Record) {
			require.Equal(t, fetchValue(topic, 0, r.Offset, 100), r.Value)
			got = append(got, r.Offset)
		})
	}
	require.Len(t, got, 50)
	require.EqualValues(t, 49, got[49])

	// The application keeps polling, as consumers do.
	before := fetches.Load()
	window, stop := context.WithTimeout(ctx, 2*time.Second)
	defer stop()
	var errs int
	for window.Err() == nil {
		fs := cl.PollFetches(window)
		fs.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				errs++
			}
		})
		require.Zero(t, fs.NumRecords(), "nothing at or past the damaged batch is data")
	}
	sent := fetches.Load() - before
	t.Logf("%d fetches, %d errors polled in 2s at the damaged batch", sent, errs)
	require.Less(t, sent, int64(40), "the client refetches the damaged batch in a loop")

	// With KeepRetryableFetchErrors the client hands the broker's error to
	// the application.
	cl2, err := kgo.NewClient(kgo.SeedBrokers(addr),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(50)}}),
		kgo.KeepRetryableFetchErrors())
	require.NoError(t, err)
	defer cl2.Close()
	for {
		fs := cl2.PollFetches(ctx)
		require.NoError(t, ctx.Err())
		require.Zero(t, fs.NumRecords())
		var fetchErr error
		fs.EachError(func(_ string, _ int32, err error) { fetchErr = err })
		if fetchErr != nil {
			require.ErrorIs(t, fetchErr, kerr.CorruptMessage)
			break
		}
	}
}

// A log damaged while the broker was down: its producer state cannot be
// replayed, so its transactions - and its last stable offset - cannot be
// known. A read_committed fetch (librdkafka's default, so kcat's) gets
// CORRUPT_MESSAGE rather than an empty partition at the log start that
// never moves; read_uncommitted still gets the batches before the damage.
func TestFetchReadCommittedOnADamagedLog(t *testing.T) {
	dir := t.TempDir()
	b, _, stop := startProduceServer(t, dir, fetchOpts)
	const topic = "damaged"
	fetchCreate(t, b, topic, 1)
	fetchAppend(t, b, topic, 0, 20, 5, 100)
	stop()
	b, err := spool.Open(dir, fetchOpts)
	require.NoError(t, err)
	damageBatch(t, b, topic, 0, 52)
	p, err := b.Partition(topic, 0)
	require.NoError(t, err)
	pdir := p.Dir()
	require.NoError(t, b.Close())
	// No producer snapshot (as after spool produce --data): the state is
	// replayed from the log, through the damage.
	snaps, err := filepath.Glob(filepath.Join(pdir, "*"+partition.SnapshotSuffix))
	require.NoError(t, err)
	for _, s := range snaps {
		require.NoError(t, os.Remove(s))
	}
	_, addr, _ := startProduceServer(t, dir, fetchOpts)
	c := fetchDial(t, addr)

	req := fetchReq(0, 1, 1<<20, topic, map[int32]int64{0: 0}, 1<<20)
	req.IsolationLevel = 1
	rp := fetchDo[*kmsg.FetchResponse](t, c, 11, req).Topics[0].Partitions[0]
	require.Equal(t, errCorruptMessage, rp.ErrorCode, "read_committed")
	require.Empty(t, rp.RecordBatches)

	req.IsolationLevel = 0
	rp = fetchDo[*kmsg.FetchResponse](t, c, 11, req).Topics[0].Partitions[0]
	require.Equal(t, errNone, rp.ErrorCode, "read_uncommitted")
	batches := batchesOf(t, rp.RecordBatches)
	require.EqualValues(t, 50, batches[len(batches)-1].NextOffset())
}

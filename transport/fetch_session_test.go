package transport

import (
	"context"
	"fmt"
	"net"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/spoolmq/spool"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// sessionParts is a fetch response's partitions: partition -> records bytes
// (nil: included without records), by topic.
func sessionParts(resp *kmsg.FetchResponse) map[int32][]byte {
	out := map[int32][]byte{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			out[p.Partition] = p.RecordBatches
		}
	}
	return out
}

func sessionKeys(m map[int32][]byte) []int32 {
	var ks []int32
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	return ks
}

// TestFetchSessionLifecycle walks one incremental fetch session (KIP-227)
// through the protocol, at v12 (topic names) and v13 (topic IDs): a full
// fetch at epoch 0 creates it and answers every partition; an incremental
// fetch answers only partitions with records, an error or a moved high
// watermark or log start; it takes new fetch offsets, added and forgotten
// partitions; a wrong epoch or an unknown session is refused and changes
// nothing; epoch -1 closes it.
func TestFetchSessionLifecycle(t *testing.T) {
	for _, version := range []int16{12, 13} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			b, _, addr := testServer(t, fetchOpts, Options{})
			topic := fmt.Sprintf("sess%d", version)
			fetchCreate(t, b, topic, 4)
			fetchAppend(t, b, topic, 0, 2, 2, 10) // p0: offsets 0-3
			id := topicIDOf(t, b, topic)
			c := fetchDial(t, addr)
			req := func(id32, epoch int32, parts map[int32]int64) *kmsg.FetchRequest {
				r := fetchReq(0, 1, 1<<20, topic, parts, 1<<20)
				r.SessionID, r.SessionEpoch = id32, epoch
				if version >= 13 {
					for i := range r.Topics {
						r.Topics[i].TopicID = id
					}
				}
				if len(parts) == 0 {
					r.Topics = nil
				}
				return r
			}
			do := func(r *kmsg.FetchRequest) *kmsg.FetchResponse {
				return fetchDo[*kmsg.FetchResponse](t, c, version, r)
			}

			// Epoch 0: a new session, every partition answered.
			resp := do(req(0, 0, map[int32]int64{0: 0, 1: 0, 2: 0}))
			require.Zero(t, resp.ErrorCode)
			sid := resp.SessionID
			require.NotZero(t, sid, "a session was created")
			got := sessionParts(resp)
			require.Equal(t, []int32{0, 1, 2}, sessionKeys(got))
			require.NotEmpty(t, got[0])

			// Epoch 1, p0 moved to its end: nothing is new.
			resp = do(req(sid, 1, map[int32]int64{0: 4}))
			require.Zero(t, resp.ErrorCode)
			require.Equal(t, sid, resp.SessionID)
			require.Empty(t, sessionParts(resp), "no partition has news")

			// Records on p1, which the request does not name: answered
			// from the session's offset (0), alone.
			fetchAppend(t, b, topic, 1, 1, 3, 10)
			resp = do(req(sid, 2, nil))
			got = sessionParts(resp)
			require.Equal(t, []int32{1}, sessionKeys(got))
			require.NotEmpty(t, got[1])
			// The client did not move p1's offset: asked again, it is
			// answered again (the session keeps the last offset asked).
			resp = do(req(sid, 3, nil))
			require.Equal(t, []int32{1}, sessionKeys(sessionParts(resp)))
			resp = do(req(sid, 4, map[int32]int64{1: 3}))
			require.Empty(t, sessionParts(resp))

			// Out of step: a wrong epoch, an unknown session. Neither
			// changes the session: epoch 5 still works after.
			for _, bad := range []struct {
				id, epoch int32
				code      int16
			}{{sid, 9, errInvalidFetchSessionEpoch}, {sid, 4, errInvalidFetchSessionEpoch}, {sid + 1, 5, errFetchSessionIDNotFound}} {
				resp = do(req(bad.id, bad.epoch, nil))
				require.Equal(t, bad.code, resp.ErrorCode, "%+v", bad)
				require.Empty(t, resp.Topics)
			}

			// Add p3 (empty: answered once, for its high watermark) and
			// forget p2.
			r := req(sid, 5, map[int32]int64{3: 0})
			if version >= 13 {
				r.ForgottenTopics = []kmsg.FetchRequestForgottenTopic{{TopicID: id, Partitions: []int32{2}}}
			} else {
				r.ForgottenTopics = []kmsg.FetchRequestForgottenTopic{{Topic: topic, Partitions: []int32{2}}}
			}
			resp = do(r)
			require.Equal(t, []int32{3}, sessionKeys(sessionParts(resp)))
			fetchAppend(t, b, topic, 2, 1, 1, 10) // forgotten: not fetched
			resp = do(req(sid, 6, nil))
			require.Empty(t, sessionParts(resp), "p2 was forgotten")

			// A moved log start offset is news even without records.
			p0, err := b.Partition(topic, 0)
			require.NoError(t, err)
			require.NoError(t, p0.Log().DeleteRecordsBefore(2))
			resp = do(req(sid, 7, nil))
			got = sessionParts(resp)
			require.Equal(t, []int32{0}, sessionKeys(got))
			require.Empty(t, got[0])
			require.Equal(t, int64(2), resp.Topics[0].Partitions[0].LogStartOffset)

			// A partition in error is answered every time; here an offset
			// past the end (OFFSET_OUT_OF_RANGE).
			resp = do(req(sid, 8, map[int32]int64{3: 100}))
			require.Equal(t, []int32{3}, sessionKeys(sessionParts(resp)))
			require.Equal(t, errOffsetOutOfRange, resp.Topics[0].Partitions[0].ErrorCode)
			resp = do(req(sid, 9, nil))
			require.Equal(t, []int32{3}, sessionKeys(sessionParts(resp)))
			resp = do(req(sid, 10, map[int32]int64{3: 0}))
			require.Equal(t, []int32{3}, sessionKeys(sessionParts(resp)), "answered once more after the error, with its high watermark")
			resp = do(req(sid, 11, nil))
			require.Empty(t, sessionParts(resp))

			// Epoch -1 closes it; the session is gone after.
			resp = do(req(sid, -1, map[int32]int64{0: 2}))
			require.Zero(t, resp.ErrorCode)
			require.Zero(t, resp.SessionID)
			require.NotEmpty(t, sessionParts(resp)[0])
			resp = do(req(sid, 12, nil))
			require.Equal(t, errFetchSessionIDNotFound, resp.ErrorCode)
		})
	}
}

func topicIDOf(t *testing.T, b *spool.Broker, topic string) [16]byte {
	t.Helper()
	d, err := b.DescribeTopic(topic)
	require.NoError(t, err)
	return d.ID
}

// TestFetchSessionCacheFull: with every slot taken by a session in recent
// use, a new full fetch is served without one (SessionID 0, the client goes
// on with full fetches); FetchSessionCacheSlots < 0 keeps none at all.
func TestFetchSessionCacheFull(t *testing.T) {
	for _, slots := range []int{1, -1} {
		b, s, addr := testServer(t, fetchOpts, Options{FetchSessionCacheSlots: slots})
		fetchCreate(t, b, "full", 1)
		c := fetchDial(t, addr)
		r := fetchReq(0, 1, 1<<20, "full", map[int32]int64{0: 0}, 1<<20)
		r.SessionEpoch = 0
		first := fetchDo[*kmsg.FetchResponse](t, c, 12, r)
		second := fetchDo[*kmsg.FetchResponse](t, c, 12, r)
		require.Zero(t, second.SessionID, "slots %d", slots)
		if slots > 0 {
			require.NotZero(t, first.SessionID)
			require.Equal(t, 1, s.fetchSessions.len())
		} else {
			require.Zero(t, first.SessionID)
			require.Zero(t, s.fetchSessions.len())
		}
	}
}

// TestFetchSessionManyPartitionsFranzGo: franz-go's consumer, which uses
// fetch sessions, reads every record of 500 partitions written before and
// while it reads (none lost, none twice, in order); once it has caught up
// its fetches and their answers are a small fraction of the full fetch's
// bytes, where without sessions each names and returns all 500.
func TestFetchSessionManyPartitionsFranzGo(t *testing.T) {
	const partitions, perPart = 500, 4
	for _, slots := range []int{0, -1} {
		t.Run(fmt.Sprintf("slots=%d", slots), func(t *testing.T) {
			b, s, addr := testServer(t, fetchOpts, Options{FetchSessionCacheSlots: slots})
			const topic = "many"
			fetchCreate(t, b, topic, partitions)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			prod, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			require.NoError(t, err)
			defer prod.Close()
			produce := func(round int) {
				for p := range int32(partitions) {
					for i := range perPart {
						prod.Produce(ctx, &kgo.Record{Partition: p, Value: fmt.Appendf(nil, "%d/%d/%d", p, round, i)}, nil)
					}
				}
				require.NoError(t, prod.Flush(ctx))
			}
			produce(0)

			cons, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
			require.NoError(t, err)
			defer cons.Close()
			var mu sync.Mutex
			next := map[int32]int64{}
			read := 0
			consume := func(want int) {
				for read < want {
					fs := cons.PollFetches(ctx)
					require.NoError(t, ctx.Err())
					fs.EachError(func(_ string, p int32, err error) { t.Fatalf("partition %d: %v", p, err) })
					fs.EachRecord(func(r *kgo.Record) {
						mu.Lock()
						defer mu.Unlock()
						require.Equal(t, next[r.Partition], r.Offset, "partition %d", r.Partition)
						next[r.Partition]++
						read++
					})
				}
			}
			consume(partitions * perPart)

			// Idle: let a few empty fetches go by, then measure them.
			fetchStats := func() (n, reqBytes int64) {
				for _, a := range s.APIStats() {
					if a.Name == "Fetch" {
						return a.Requests, a.Bytes
					}
				}
				return 0, 0
			}
			time.Sleep(300 * time.Millisecond)
			n0, q0 := fetchStats()
			time.Sleep(600 * time.Millisecond)
			n1, q1 := fetchStats()
			require.Greater(t, n1-n0, int64(1), "the consumer kept fetching")
			perReq := (q1 - q0) / (n1 - n0)
			t.Logf("idle fetches: %d, %d request bytes each", n1-n0, perReq)
			if slots >= 0 {
				require.Less(t, perReq, int64(200), "an idle incremental fetch names no partition")
			} else {
				require.Greater(t, perReq, int64(partitions*10), "without sessions every fetch names every partition")
			}

			// New records on every partition, read exactly once each.
			produce(1)
			consume(2 * partitions * perPart)
			for p := range int32(partitions) {
				require.Equal(t, int64(2*perPart), next[p], "partition %d", p)
			}
			if slots >= 0 {
				require.Positive(t, s.fetchSessions.len())
			}
		})
	}
}

// BenchmarkFetchIdleManyPartitions: one consumer's fetch of 1,000 caught-up
// partitions, MaxWait 0 (nothing to wait for), as a full fetch every time
// (no session) and as an incremental fetch in a session. It reports the
// server's time per fetch (the round trip over loopback) and the bytes each
// way: what an idle consumer of many partitions costs per poll.
func BenchmarkFetchIdleManyPartitions(b *testing.B) {
	const partitions = 1000
	br, _, addr := testServer(b, fetchOpts, Options{})
	const topic = "idle-many"
	fetchCreate(b, br, topic, partitions)
	offsets := map[int32]int64{}
	for p := range int32(partitions) {
		offsets[p] = 0
	}
	for _, mode := range []string{"full", "session"} {
		b.Run(mode, func(b *testing.B) {
			c, err := net.Dial("tcp", addr)
			require.NoError(b, err)
			defer c.Close()
			req := fetchReq(0, 1, 1<<20, topic, offsets, 1<<20)
			var sid int32
			if mode == "session" {
				req.SessionEpoch = 0
				resp := fetchDo[*kmsg.FetchResponse](b, c, 12, req)
				require.NotZero(b, resp.SessionID)
				sid = resp.SessionID
				req.Topics = nil
			}
			var reqBytes, respBytes int64
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if mode == "session" {
					req.SessionID, req.SessionEpoch = sid, int32(i+1)
				}
				resp, raw, err := fetchRoundTrip(c, 12, req, 10*time.Second)
				if err != nil {
					b.Fatal(err)
				}
				if code := resp.(*kmsg.FetchResponse).ErrorCode; code != 0 {
					b.Fatalf("error %d", code)
				}
				respBytes += int64(len(raw))
				reqBytes += int64(len(req.AppendTo(nil)))
			}
			b.ReportMetric(float64(reqBytes)/float64(b.N), "req-B/op")
			b.ReportMetric(float64(respBytes)/float64(b.N), "resp-B/op")
		})
	}
}

package replicatest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/spoolmq/spool/replica"
	"github.com/stretchr/testify/require"
)

// BenchmarkFailover measures the time from a leader's crash to the first
// acks=all write the new leader acknowledges (RF=3, MinInSyncReplicas=2,
// SessionTimeout 300ms, ReplicaLagTime 200ms), as a producer retrying every
// 5 ms sees it. It reports the median and p99 over b.N failovers.
func BenchmarkFailover(b *testing.B) {
	c, err := New(Options{Dir: b.TempDir(), MinInSyncReplicas: 2})
	require.NoError(b, err)
	defer c.Close()
	ctx := context.Background()
	require.NoError(b, c.CreateTopic(ctx, replica.TopicSpec{Name: "f", Partitions: 1, ReplicationFactor: 3}))
	all := replica.AppendOptions{Acks: replica.AcksAll, Timeout: 5 * time.Second}
	var took []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		require.NoError(b, c.WaitConverged(ctx, "f", 0))
		_, err := c.Produce(ctx, "f", 0, recs("before", 1), all)
		require.NoError(b, err)
		st, err := c.Leader("f", 0)
		require.NoError(b, err)
		b.StartTimer()
		start := time.Now()
		require.NoError(b, c.Crash(st.Leader, false))
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err = c.Produce(pctx, "f", 0, recs("after", 1), all)
		cancel()
		took = append(took, time.Since(start))
		require.NoError(b, err)
		b.StopTimer()
		require.NoError(b, c.Restart(st.Leader))
		b.StartTimer()
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Milliseconds()), "p50-ms")
	b.ReportMetric(float64(took[min(len(took)-1, len(took)*99/100)].Milliseconds()), "p99-ms")
	b.ReportMetric(float64(took[len(took)-1].Milliseconds()), "max-ms")
}

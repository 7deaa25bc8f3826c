package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
)

// Three "spool serve" nodes, each with an INTERNAL listener the nodes use
// among themselves and a SASL EXTERNAL one for clients: a client of
// either is told every broker at its endpoint on that listener; records
// produced with acks=all through EXTERNAL are replicated (over INTERNAL)
// and read back; EXTERNAL refuses a client without SASL.
func TestServeClusterListeners(t *testing.T) {
	var ctrl []string
	for range 3 {
		ctrl = append(ctrl, freeAddr(t))
	}
	voters := votersFlag(ctrl)
	listeners := map[int]map[string]string{} // node -> listener name -> address
	for id := 1; id <= 3; id++ {
		s := startClusterNode(t, id, t.TempDir(), voters,
			"--listeners", "EXTERNAL://127.0.0.1:0,INTERNAL://127.0.0.1:0",
			"--listener-security-protocol-map", "INTERNAL:PLAINTEXT,EXTERNAL:SASL_PLAINTEXT",
			"--inter-broker-listener-name", "INTERNAL", "--sasl-plain", "app:pw")
		listeners[id] = map[string]string{}
		for _, line := range strings.Split(s.log(), "\n") {
			if rest, ok := strings.CutPrefix(line, "spool: listener "); ok {
				name, addr, _ := strings.Cut(rest, " on ")
				listeners[id][name] = addr
			}
			if rest, ok := strings.CutPrefix(line, "spool: serving on "); ok {
				require.Equal(t, listeners[id]["INTERNAL"], rest, "the nodes' listener is the node's address")
			}
		}
		require.Len(t, listeners[id], 2, s.log())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sasl := kgo.SASL(plain.Auth{User: "app", Pass: "pw"}.AsMechanism())
	external, err := kgo.NewClient(kgo.SeedBrokers(listeners[2]["EXTERNAL"]), sasl, kgo.DefaultProduceTopic("events"),
		kgo.ConsumeTopics("events"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer external.Close()
	internal, err := kgo.NewClient(kgo.SeedBrokers(listeners[1]["INTERNAL"]))
	require.NoError(t, err)
	defer internal.Close()

	// Each client is told the brokers on its own listener.
	endpoints := func(cl *kgo.Client) []string {
		var out []string
		require.Eventually(t, func() bool {
			resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
			if err != nil || len(resp.Brokers) != 3 {
				return false
			}
			out = out[:0]
			for _, b := range resp.Brokers {
				out = append(out, fmt.Sprintf("%d=127.0.0.1:%d", b.NodeID, b.Port))
			}
			sort.Strings(out)
			return true
		}, 30*time.Second, 100*time.Millisecond)
		return out
	}
	want := func(name string) []string {
		var out []string
		for id := 1; id <= 3; id++ {
			out = append(out, fmt.Sprintf("%d=%s", id, listeners[id][name]))
		}
		return out
	}
	require.Equal(t, want("EXTERNAL"), endpoints(external))
	require.Equal(t, want("INTERNAL"), endpoints(internal))

	create := kmsg.NewPtrCreateTopicsRequest()
	ct := kmsg.NewCreateTopicsRequestTopic()
	ct.Topic, ct.NumPartitions, ct.ReplicationFactor = "events", 3, 3
	create.Topics = append(create.Topics, ct)
	cresp, err := create.RequestWith(ctx, external)
	require.NoError(t, err)
	require.Zero(t, cresp.Topics[0].ErrorCode)
	const n = 30
	for i := range n {
		require.NoError(t, external.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprint(i))}).FirstErr())
	}
	got := 0
	for got < n {
		fs := external.PollFetches(ctx)
		require.NoError(t, ctx.Err())
		got += fs.NumRecords()
	}
	require.Equal(t, n, got)

	noSASL, err := kgo.NewClient(kgo.SeedBrokers(listeners[3]["EXTERNAL"]), kgo.RetryTimeout(2*time.Second))
	require.NoError(t, err)
	defer noSASL.Close()
	_, err = kmsg.NewPtrMetadataRequest().RequestWith(ctx, noSASL)
	require.Error(t, err, "EXTERNAL requires SASL")
}

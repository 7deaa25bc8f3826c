package transport

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/acl"
	"github.com/spoolmq/spool/log"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkAuthorizer measures one franz-go client producing 100-byte
// records (acks=all, default batching) to a server without an authorizer
// and to one enforcing 1,000 ACLs (the client, User:ANONYMOUS, allowed to
// write its topic by one of them): compare records/s in one run.
func BenchmarkAuthorizer(b *testing.B) {
	var bindings []acl.Binding
	for i := range 999 {
		bindings = append(bindings, acl.Binding{ResourceType: acl.ResourceTopic, Name: fmt.Sprintf("topic-%d", i), Pattern: acl.PatternLiteral,
			Principal: fmt.Sprintf("User:u%d", i%50), Host: "*", Operation: acl.OpWrite, Permission: acl.Allow})
	}
	bindings = append(bindings, acl.Binding{ResourceType: acl.ResourceTopic, Name: "t", Pattern: acl.PatternLiteral,
		Principal: "User:ANONYMOUS", Host: "*", Operation: acl.OpAll, Permission: acl.Allow})
	for _, mode := range []string{"off", "1000-acls"} {
		var opts Options
		if mode != "off" {
			a, err := acl.New(acl.Config{Bindings: bindings})
			require.NoError(b, err)
			opts.Authorizer = a
		}
		br, _, addr := testServer(b, spool.Options{Flush: log.None}, opts)
		require.NoError(b, br.CreateTopic(context.Background(), "t", spool.TopicConfig{Partitions: 1}))
		value := make([]byte, 100)
		b.Run("produce/authorizer="+mode, func(b *testing.B) {
			cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("t"))
			require.NoError(b, err)
			defer cl.Close()
			ctx := context.Background()
			b.SetBytes(100)
			start := time.Now()
			for b.Loop() {
				cl.Produce(ctx, &kgo.Record{Value: value}, nil)
			}
			require.NoError(b, cl.Flush(ctx))
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "records/s")
		})
	}
}

package transport

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// BenchmarkMetadataManyPartitions: a Metadata request for every topic of a
// broker with 10 topics of 100 and of 400 partitions (1,000 and 4,000 in
// all; an open partition holds 4 file descriptors, and 10,000 would pass
// the 20,000 this machine allows), over loopback: what a client's metadata
// refresh costs the server as partitions grow. It reports the response's
// bytes.
func BenchmarkMetadataManyPartitions(b *testing.B) {
	for _, per := range []int32{100, 400} {
		b.Run(fmt.Sprintf("partitions=%d", 10*per), func(b *testing.B) {
			br, _, addr := testServer(b, fetchOpts, Options{})
			for i := range 10 {
				fetchCreate(b, br, fmt.Sprintf("meta-%d", i), per)
			}
			c, err := net.Dial("tcp", addr)
			require.NoError(b, err)
			defer c.Close()
			req := kmsg.NewPtrMetadataRequest() // null topics: every topic
			var bytes int64
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				resp, raw, err := fetchRoundTrip(c, 12, req, time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				if n := len(resp.(*kmsg.MetadataResponse).Topics); n != 10 {
					b.Fatalf("%d topics", n)
				}
				bytes += int64(len(raw))
			}
			b.ReportMetric(float64(bytes)/float64(b.N), "resp-B/op")
		})
	}
}

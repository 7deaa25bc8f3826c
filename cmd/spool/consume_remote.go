package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/spoolmq/spool"
)

// Consuming from a running server (consume --bootstrap-server): the data
// directory of a server is locked, and reading it over the Kafka protocol
// is what any other client would do. The printing, --count and --timeout
// are the same as for a data directory.

// errRemoteTopic: the brokers do not know the topic or partition.
var errRemoteTopic = errors.New("the brokers have no such topic or partition")

// runRemote consumes topic from the brokers at servers and returns the
// exit status.
func (cc *consoleConsumer) runRemote(ctx context.Context, servers []string, sec *clientSecurity, topic string, part int32, from startPosition) int {
	secOpts, err := sec.opts()
	if err != nil {
		fmt.Fprintf(cc.stderr, "spool consume: %v\n", err)
		return exitProblem
	}
	start := kgo.NewOffset().AtEnd()
	switch from.kind {
	case "earliest":
		start = kgo.NewOffset().AtStart()
	case "offset":
		start = kgo.NewOffset().At(from.offset)
	case "time":
		start = kgo.NewOffset().AfterMilli(from.time.UnixMilli())
	}
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(servers...),
		kgo.ClientID("spool-consume"),
		kgo.DialTimeout(10 * time.Second),
		// An offset outside the log: the client asks again from the end,
		// as the data directory consumer moves one past the end there.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()),
	}, secOpts...)
	if part >= 0 {
		opts = append(opts, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {part: start}}))
	} else {
		opts = append(opts, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(start))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		fmt.Fprintf(cc.stderr, "spool consume: %v\n", err)
		return exitProblem
	}
	defer cl.Close()
	if err := checkRemoteTopic(ctx, cl, topic, part); err != nil {
		fmt.Fprintf(cc.stderr, "spool consume: %v\n", err)
		return exitProblem
	}
	return cc.consume(ctx, topic, from, func(ctx context.Context) ([]spool.Record, error) {
		fetches := cl.PollFetches(ctx)
		var recs []spool.Record
		fetches.EachRecord(func(r *kgo.Record) {
			recs = append(recs, spool.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp, Key: r.Key, Value: r.Value})
		})
		var ferr error
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) && ferr == nil {
				ferr = fmt.Errorf("%s-%d: %w", t, p, err)
			}
		})
		return recs, ferr
	})
}

// checkRemoteTopic asks the brokers whether topic (and partition part, if
// not -1) exists, so that a typo fails at once instead of waiting for a
// topic that may never come.
func checkRemoteTopic(ctx context.Context, cl *kgo.Client, topic string, part int32) error {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := req.RequestWith(rctx, cl)
	if err != nil {
		return fmt.Errorf("asking the brokers for topic %s: %w", topic, err)
	}
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return fmt.Errorf("%w: %s: %w", errRemoteTopic, topic, err)
		}
		if part >= int32(len(t.Partitions)) {
			return fmt.Errorf("%w: %s-%d (the topic has %d)", errRemoteTopic, topic, part, len(t.Partitions))
		}
		return nil
	}
	return fmt.Errorf("%w: %s", errRemoteTopic, topic)
}

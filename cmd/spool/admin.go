package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/spoolmq/spool"
)

// The admin client of "spool topics --bootstrap-server": the topics of a
// running broker or cluster (a spool serve, or any Kafka cluster), managed
// over the Kafka protocol as kafka-topics does, with franz-go's kgo client
// sending kmsg requests. kgo routes each request where Kafka wants it:
// CreateTopics and DeleteTopics to the controller, ListOffsets to each
// partition's leader, Metadata and DescribeConfigs to any broker.

var (
	// errNoBroker: no bootstrap server (nor a broker it named) could be
	// connected to.
	errNoBroker = errors.New("no broker answered")
	// errNoAnswer: the brokers did not answer within --timeout.
	errNoAnswer = errors.New("no answer in time")
)

// adminClient talks to the brokers named by --bootstrap-server.
type adminClient struct {
	cl      *kgo.Client
	servers string // as given, for messages
	timeout time.Duration
}

// newAdminClient returns a client of the brokers at servers (host:port,
// checked by the caller). It connects on its first request. timeout bounds
// every request, its retries included, and each connection attempt.
func newAdminClient(servers []string, timeout time.Duration, sec *clientSecurity) (*adminClient, error) {
	secOpts, err := sec.opts()
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(servers...),
		kgo.DialTimeout(min(timeout, 10*time.Second)),
		kgo.RetryTimeout(timeout),
		kgo.ClientID("spool-topics"),
	}, secOpts...)...)
	if err != nil {
		return nil, err
	}
	return &adminClient{cl: cl, servers: strings.Join(servers, ","), timeout: timeout}, nil
}

// Close closes the client's connections.
func (a *adminClient) Close() { a.cl.Close() }

// failed turns the error of a request that got no answer into one that
// says why: nothing listening, or no answer within the timeout.
func (a *adminClient) failed(ctx context.Context, err error) error {
	if _, ok := errors.AsType[*net.OpError](err); ok {
		return fmt.Errorf("%w (bootstrap servers %s): %v", errNoBroker, a.servers, err)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w: the brokers at %s did not answer within %v (--timeout): %v", errNoAnswer, a.servers, a.timeout, err)
	}
	return err
}

// kafkaError is an error code a broker answered for one topic or
// partition, with the broker's message if it gave one. It unwraps to
// franz-go's kerr error for the code, so callers can errors.Is it.
type kafkaError struct {
	topic string
	code  int16
	msg   string // the broker's ErrorMessage; "" if none
}

func newKafkaError(topic string, code int16, msg *string) *kafkaError {
	e := &kafkaError{topic: topic, code: code}
	if msg != nil {
		e.msg = *msg
	}
	return e
}

func (e *kafkaError) Error() string {
	name, text := fmt.Sprintf("error code %d", e.code), ""
	if ke, ok := kerr.ErrorForCode(e.code).(*kerr.Error); ok {
		name, text = ke.Message, ke.Description
	}
	if e.msg != "" {
		text = e.msg // the broker's own words say more than the code's description
	}
	if e.topic == "" {
		return fmt.Sprintf("%s: %s", name, text) // an answer about no topic (a broker's unregistration, say)
	}
	return fmt.Sprintf("topic %q: %s: %s", e.topic, name, text)
}

func (e *kafkaError) Unwrap() error { return kerr.ErrorForCode(e.code) }

// topicSetting is one topic setting of a CreateTopics request.
type topicSetting struct{ name, value string }

// listTopics returns the names of the cluster's topics, sorted.
func (a *adminClient) listTopics(ctx context.Context) ([]string, error) {
	req := kmsg.NewPtrMetadataRequest() // null Topics: every topic
	resp, err := req.RequestWith(ctx, a.cl)
	if err != nil {
		return nil, a.failed(ctx, err)
	}
	var names []string
	for _, t := range resp.Topics {
		if t.Topic != nil && t.ErrorCode == 0 {
			names = append(names, *t.Topic)
		}
	}
	slices.Sort(names)
	return names, nil
}

// createTopic creates a topic. partitions -1 and replicationFactor -1 take
// the cluster's defaults; settings are Kafka's topic settings, checked by
// the broker (INVALID_CONFIG for one it does not know or a bad value).
func (a *adminClient) createTopic(ctx context.Context, name string, partitions int32, replicationFactor int16, settings []topicSetting) error {
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = int32(a.timeout.Milliseconds())
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic, t.NumPartitions, t.ReplicationFactor = name, partitions, replicationFactor
	for _, s := range settings {
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = s.name, kmsg.StringPtr(s.value)
		t.Configs = append(t.Configs, c)
	}
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, a.cl)
	if err != nil {
		return a.failed(ctx, err)
	}
	if len(resp.Topics) != 1 {
		return fmt.Errorf("topic %q: the broker answered for %d topics", name, len(resp.Topics))
	}
	if rt := resp.Topics[0]; rt.ErrorCode != 0 {
		return newKafkaError(name, rt.ErrorCode, rt.ErrorMessage)
	}
	return nil
}

// deleteTopic deletes a topic and its data.
func (a *adminClient) deleteTopic(ctx context.Context, name string) error {
	req := kmsg.NewPtrDeleteTopicsRequest()
	req.TimeoutMillis = int32(a.timeout.Milliseconds())
	req.TopicNames = []string{name} // v0-5
	t := kmsg.NewDeleteTopicsRequestTopic()
	t.Topic = kmsg.StringPtr(name) // v6+
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, a.cl)
	if err != nil {
		return a.failed(ctx, err)
	}
	if len(resp.Topics) != 1 {
		return fmt.Errorf("topic %q: the broker answered for %d topics", name, len(resp.Topics))
	}
	if rt := resp.Topics[0]; rt.ErrorCode != 0 {
		return newKafkaError(name, rt.ErrorCode, rt.ErrorMessage)
	}
	return nil
}

// describeTopics describes the named topics, or every topic if names is
// empty, sorted by name: from Metadata each partition's leader, leader
// epoch, replicas, ISR and offline replicas; from DescribeConfigs the
// settings "spool topics describe" shows; from ListOffsets, asked of each
// partition's leader, its start offset, end offset and high watermark. A
// topic that could not be described has an error in errs (at the same
// index as its name in the result) instead; err is a failure of the whole
// request.
func (a *adminClient) describeTopics(ctx context.Context, names []string) (views []topicView, errs []error, err error) {
	mreq := kmsg.NewPtrMetadataRequest()
	if len(names) > 0 {
		for _, n := range names {
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(n)
			mreq.Topics = append(mreq.Topics, rt)
		}
	}
	mreq.AllowAutoTopicCreation = false
	mresp, err := mreq.RequestWith(ctx, a.cl)
	if err != nil {
		return nil, nil, a.failed(ctx, err)
	}
	topics := mresp.Topics
	slices.SortFunc(topics, func(x, y kmsg.MetadataResponseTopic) int {
		return strings.Compare(stringOrEmpty(x.Topic), stringOrEmpty(y.Topic))
	})
	views = make([]topicView, len(topics))
	errs = make([]error, len(topics))
	byName := map[string]*topicView{}
	for i, t := range topics {
		name := stringOrEmpty(t.Topic)
		views[i].Name = name
		if t.ErrorCode != 0 {
			errs[i] = newKafkaError(name, t.ErrorCode, nil)
			continue
		}
		views[i] = remoteView(t)
		byName[name] = &views[i]
	}
	if len(byName) == 0 {
		return views, errs, nil
	}
	cerrs, err := a.describeConfigs(ctx, byName)
	if err != nil {
		return nil, nil, err
	}
	for i := range views {
		if e := cerrs[views[i].Name]; e != nil && errs[i] == nil {
			errs[i] = e
		}
	}
	a.listOffsets(ctx, byName)
	return views, errs, nil
}

// remoteView is a topic as Metadata describes it; its offsets are
// filled in by listOffsets, its settings by describeConfigs.
func remoteView(t kmsg.MetadataResponseTopic) topicView {
	v := topicView{Name: stringOrEmpty(t.Topic), ID: spool.TopicID(t.TopicID).String()}
	for _, p := range t.Partitions {
		pv := partitionView{
			Partition: p.Partition, Leader: p.Leader, LeaderEpoch: p.LeaderEpoch,
			Replicas: p.Replicas, ISR: p.ISR, OfflineReplicas: p.OfflineReplicas,
		}
		if p.Leader < 0 {
			pv.Leader = -1
			pv.Problem = "no leader"
			if p.ErrorCode != 0 {
				pv.Problem = newKafkaError(v.Name, p.ErrorCode, nil).Error()
			}
		}
		v.Partitions = append(v.Partitions, pv)
	}
	slices.SortFunc(v.Partitions, func(x, y partitionView) int { return int(x.Partition - y.Partition) })
	return v
}

// describeConfigs fills in the Configs of the topics, returning the error
// of each topic whose settings the broker would not give.
func (a *adminClient) describeConfigs(ctx context.Context, topics map[string]*topicView) (map[string]error, error) {
	req := kmsg.NewPtrDescribeConfigsRequest()
	for name := range topics {
		r := kmsg.NewDescribeConfigsRequestResource()
		r.ResourceType, r.ResourceName, r.ConfigNames = kmsg.ConfigResourceTypeTopic, name, describedSettings
		req.Resources = append(req.Resources, r)
	}
	resp, err := req.RequestWith(ctx, a.cl)
	if err != nil {
		return nil, a.failed(ctx, err)
	}
	errs := map[string]error{}
	for name := range topics {
		errs[name] = fmt.Errorf("topic %q: the broker did not describe its settings", name)
	}
	for _, r := range resp.Resources {
		v, ok := topics[r.ResourceName]
		if !ok {
			continue
		}
		if r.ErrorCode != 0 {
			errs[r.ResourceName] = newKafkaError(r.ResourceName, r.ErrorCode, r.ErrorMessage)
			continue
		}
		values := map[string]string{}
		for _, c := range r.Configs {
			if c.Value != nil {
				values[c.Name] = *c.Value
			}
		}
		var kv []string
		for _, name := range describedSettings {
			if value, ok := values[name]; ok {
				kv = append(kv, name+"="+value)
			}
		}
		v.Configs = strings.Join(kv, ",")
		delete(errs, r.ResourceName)
	}
	return errs, nil
}

// listOffsets fills in the partitions' offsets, asking each leader three
// ListOffsets: the earliest offset (-2) as a consumer, the latest (-1) as
// a consumer (the high watermark) and the latest as Kafka's debugging
// replica (-2), which is not held below the high watermark: the log end.
// A partition whose leader did not answer keeps its offsets unknown, with
// the reason in OffsetsProblem.
func (a *adminClient) listOffsets(ctx context.Context, topics map[string]*topicView) {
	ask := func(timestamp int64, replicaID int32, set func(p *partitionView, offset int64)) {
		req := kmsg.NewPtrListOffsetsRequest()
		req.ReplicaID = replicaID
		for name, v := range topics {
			rt := kmsg.NewListOffsetsRequestTopic()
			rt.Topic = name
			for _, p := range v.Partitions {
				if p.Leader < 0 {
					continue
				}
				rp := kmsg.NewListOffsetsRequestTopicPartition()
				rp.Partition, rp.Timestamp = p.Partition, timestamp
				rt.Partitions = append(rt.Partitions, rp)
			}
			if len(rt.Partitions) > 0 {
				req.Topics = append(req.Topics, rt)
			}
		}
		if len(req.Topics) == 0 {
			return
		}
		answered := map[string]map[int32]bool{}
		var failure error
		for _, shard := range a.cl.RequestSharded(ctx, req) {
			if shard.Err != nil {
				failure = a.failed(ctx, shard.Err)
				continue
			}
			resp := shard.Resp.(*kmsg.ListOffsetsResponse)
			for _, rt := range resp.Topics {
				v := topics[rt.Topic]
				if v == nil {
					continue
				}
				for _, rp := range rt.Partitions {
					p := v.partition(rp.Partition)
					if p == nil {
						continue
					}
					if answered[rt.Topic] == nil {
						answered[rt.Topic] = map[int32]bool{}
					}
					answered[rt.Topic][rp.Partition] = true
					if rp.ErrorCode != 0 {
						p.offsetsUnknown(newKafkaError(rt.Topic, rp.ErrorCode, nil).Error())
						continue
					}
					set(p, rp.Offset)
				}
			}
		}
		if failure == nil {
			failure = errors.New("no broker answered")
		}
		for name, v := range topics {
			for i := range v.Partitions {
				if p := &v.Partitions[i]; p.Leader >= 0 && !answered[name][p.Partition] {
					p.offsetsUnknown(failure.Error())
				}
			}
		}
	}
	for _, v := range topics {
		for i := range v.Partitions {
			v.Partitions[i].HasOffsets = v.Partitions[i].Leader >= 0
		}
	}
	ask(-2, -1, func(p *partitionView, off int64) { p.StartOffset = off })
	ask(-1, -1, func(p *partitionView, off int64) { p.HighWatermark = off })
	ask(-1, -2, func(p *partitionView, off int64) { p.EndOffset = off })
}

// stringOrEmpty is *s, or "" for nil.
func stringOrEmpty(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

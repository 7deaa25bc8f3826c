package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The requests behind "spool cluster": DescribeCluster (v2: fenced
// brokers too), DescribeQuorum (franz-go sends it to the controller; a
// spool broker forwards it to the quorum's leader), Metadata and
// DescribeConfigs for the partitions' health, DescribeLogDirs (to every
// broker) and DescribeProducers (to each partition's leader).

// brokerView is one registered broker.
type brokerView struct {
	ID     int32
	Host   string
	Port   int32
	Rack   string
	Fenced bool
}

// quorumMember is a member of the controller quorum as its leader sees
// it; times in Unix ms, -1 unknown.
type quorumMember struct {
	ID                      int32
	LogEnd                  int64
	LastFetch, LastCaughtUp int64
}

// quorumView is the controller quorum (DescribeQuorum).
type quorumView struct {
	Leader, Epoch     int32
	HighWatermark     int64
	Voters, Observers []quorumMember
}

// partitionHealth is a partition that needs an operator's eye.
type partitionHealth struct {
	Topic         string
	Partition     int32
	Leader        int32
	Replicas, ISR []int32
	MinISR        int // -1: unknown
}

// clusterView is what "spool cluster describe" shows.
type clusterView struct {
	ClusterID  string
	Controller int32
	Brokers    []brokerView
	// Quorum is nil when the cluster has none (NoQuorum says why).
	Quorum   *quorumView
	NoQuorum string
	// The partitions with fewer in-sync replicas than replicas, with fewer
	// than min.insync.replicas, and without a leader.
	UnderReplicated, UnderMinISR, Offline []partitionHealth
}

// describeBrokers asks DescribeCluster for the cluster id, the controller
// and every registered broker, fenced ones included (v2).
func (a *adminClient) describeBrokers(ctx context.Context, v *clusterView) error {
	req := kmsg.NewPtrDescribeClusterRequest()
	req.IncludeFencedBrokers = true
	resp, err := req.RequestWith(ctx, a.cl)
	if err != nil {
		return a.failed(ctx, err)
	}
	if resp.ErrorCode != 0 {
		return newKafkaError("", resp.ErrorCode, resp.ErrorMessage).asCluster()
	}
	v.ClusterID, v.Controller = resp.ClusterID, resp.ControllerID
	for _, b := range resp.Brokers {
		bv := brokerView{ID: b.NodeID, Host: b.Host, Port: b.Port, Fenced: b.IsFenced}
		if b.Rack != nil {
			bv.Rack = *b.Rack
		}
		v.Brokers = append(v.Brokers, bv)
	}
	slices.SortFunc(v.Brokers, func(x, y brokerView) int { return cmp.Compare(x.ID, y.ID) })
	return nil
}

// describeQuorum asks DescribeQuorum of the metadata partition. A broker
// that does not host it (a standalone spool broker) leaves v.Quorum nil
// with the reason.
func (a *adminClient) describeQuorum(ctx context.Context, v *clusterView) error {
	req := kmsg.NewPtrDescribeQuorumRequest()
	rt := kmsg.NewDescribeQuorumRequestTopic()
	rt.Topic = "__cluster_metadata"
	rt.Partitions = []kmsg.DescribeQuorumRequestTopicPartition{{Partition: 0}}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, a.cl)
	if err != nil {
		return a.failed(ctx, err)
	}
	if resp.ErrorCode != 0 {
		return newKafkaError("__cluster_metadata", resp.ErrorCode, resp.ErrorMessage)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return fmt.Errorf("DescribeQuorum: the controller answered for %d topics", len(resp.Topics))
	}
	p := resp.Topics[0].Partitions[0]
	if p.ErrorCode == kerr.UnknownTopicOrPartition.Code {
		v.NoQuorum = "the broker has no controller quorum (a standalone broker)"
		if p.ErrorMessage != nil {
			v.NoQuorum = *p.ErrorMessage
		}
		return nil
	}
	if p.ErrorCode != 0 {
		return newKafkaError("__cluster_metadata", p.ErrorCode, p.ErrorMessage)
	}
	q := &quorumView{Leader: p.LeaderID, Epoch: p.LeaderEpoch, HighWatermark: p.HighWatermark}
	member := func(r kmsg.DescribeQuorumResponseTopicPartitionReplicaState) quorumMember {
		return quorumMember{ID: r.ReplicaID, LogEnd: r.LogEndOffset, LastFetch: r.LastFetchTimestamp, LastCaughtUp: r.LastCaughtUpTimestamp}
	}
	for _, r := range p.CurrentVoters {
		q.Voters = append(q.Voters, member(r))
	}
	for _, r := range p.Observers {
		q.Observers = append(q.Observers, member(r))
	}
	v.Quorum = q
	return nil
}

// describeHealth lists the partitions that are under-replicated, under
// their topic's min.insync.replicas, or offline, from Metadata and
// DescribeConfigs.
func (a *adminClient) describeHealth(ctx context.Context, v *clusterView) error {
	mreq := kmsg.NewPtrMetadataRequest() // null topics: all
	mresp, err := mreq.RequestWith(ctx, a.cl)
	if err != nil {
		return a.failed(ctx, err)
	}
	minISR := map[string]int{}
	creq := kmsg.NewPtrDescribeConfigsRequest()
	for _, t := range mresp.Topics {
		if t.Topic == nil || t.ErrorCode != 0 {
			continue
		}
		minISR[*t.Topic] = -1
		r := kmsg.NewDescribeConfigsRequestResource()
		r.ResourceType, r.ResourceName, r.ConfigNames = kmsg.ConfigResourceTypeTopic, *t.Topic, []string{"min.insync.replicas"}
		creq.Resources = append(creq.Resources, r)
	}
	if len(creq.Resources) > 0 {
		cresp, err := creq.RequestWith(ctx, a.cl)
		if err != nil {
			return a.failed(ctx, err)
		}
		for _, r := range cresp.Resources {
			for _, c := range r.Configs {
				if r.ErrorCode == 0 && c.Name == "min.insync.replicas" && c.Value != nil {
					if n, err := strconv.Atoi(*c.Value); err == nil {
						minISR[r.ResourceName] = n
					}
				}
			}
		}
	}
	for _, t := range mresp.Topics {
		if t.Topic == nil || t.ErrorCode != 0 {
			continue
		}
		for _, p := range t.Partitions {
			h := partitionHealth{Topic: *t.Topic, Partition: p.Partition, Leader: p.Leader, Replicas: p.Replicas, ISR: p.ISR, MinISR: minISR[*t.Topic]}
			if len(p.ISR) < len(p.Replicas) {
				v.UnderReplicated = append(v.UnderReplicated, h)
			}
			if h.MinISR > 0 && len(p.ISR) < h.MinISR {
				v.UnderMinISR = append(v.UnderMinISR, h)
			}
			if p.Leader < 0 {
				v.Offline = append(v.Offline, h)
			}
		}
	}
	byTP := func(x, y partitionHealth) int {
		return cmp.Or(strings.Compare(x.Topic, y.Topic), cmp.Compare(x.Partition, y.Partition))
	}
	slices.SortFunc(v.UnderReplicated, byTP)
	slices.SortFunc(v.UnderMinISR, byTP)
	slices.SortFunc(v.Offline, byTP)
	return nil
}

// asCluster names the cluster rather than a topic in the error.
func (e *kafkaError) asCluster() error {
	name, text := fmt.Sprintf("error code %d", e.code), e.msg
	if ke, ok := kerr.ErrorForCode(e.code).(*kerr.Error); ok {
		name = ke.Message
		if text == "" {
			text = ke.Description
		}
	}
	return fmt.Errorf("%s: %s: %w", name, text, kerr.ErrorForCode(e.code))
}

// connectionFailure reports an error after which asking again is pointless:
// no broker could be reached, or none answered in time.
func connectionFailure(err error) bool {
	return errors.Is(err, errNoBroker) || errors.Is(err, errNoAnswer)
}

func runClusterDescribe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, cf := newClusterFlagSet("describe", "--bootstrap-server HOST:PORT[,HOST:PORT...] [flags]",
		"Describes a running cluster: its id and active controller; the controller quorum -\n"+
			"its leader, epoch and high watermark (the metadata log's committed end), and for each\n"+
			"voter and observer (a broker that is not a controller) its log end offset, its lag\n"+
			"behind the leader's and how long ago the leader last heard from it and last saw it\n"+
			"caught up; the brokers with their address, rack and whether they are fenced (out of the\n"+
			"cluster: their session expired or they shut down); and the partitions that are\n"+
			"under-replicated (fewer in-sync replicas than replicas), under min ISR (fewer in-sync\n"+
			"replicas than the topic's min.insync.replicas: acks=all writes are refused) or offline\n"+
			"(no leader). A standalone broker has no quorum. Exit status 1 if a request failed.", stderr)
	if code, ok := parseArgs(fs, args); !ok {
		return code
	}
	if code, ok := cf.check(); !ok {
		return code
	}
	a, ctx, cancel, ok := cf.dial(ctx, "spool cluster describe", stderr)
	if !ok {
		return exitProblem
	}
	defer cancel()
	defer a.Close()
	var v clusterView
	code := exitOK
	for _, step := range []func(context.Context, *clusterView) error{a.describeBrokers, a.describeQuorum, a.describeHealth} {
		if err := step(ctx, &v); err != nil {
			fmt.Fprintf(stderr, "spool cluster describe: %v\n", err)
			code = exitProblem
			if connectionFailure(err) {
				return code
			}
		}
	}
	printClusterView(stdout, &v, time.Now())
	return code
}

// printClusterView prints what "spool cluster describe" found; ages are
// counted to now on this machine's clock from the leader's timestamps.
func printClusterView(w io.Writer, v *clusterView, now time.Time) {
	fmt.Fprintf(w, "Cluster ID: %s\n", orDash(v.ClusterID))
	controller := "none"
	if v.Controller >= 0 {
		controller = strconv.Itoa(int(v.Controller))
	}
	fmt.Fprintf(w, "Controller: %s\n\n", controller)

	switch q := v.Quorum; {
	case q != nil:
		var leaderEnd int64 = -1
		for _, m := range q.Voters {
			if m.ID == q.Leader {
				leaderEnd = m.LogEnd
			}
		}
		maxLag := int64(0)
		for _, m := range append(slices.Clone(q.Voters), q.Observers...) {
			if m.LogEnd >= 0 && leaderEnd >= 0 {
				maxLag = max(maxLag, leaderEnd-m.LogEnd)
			}
		}
		fmt.Fprintf(w, "Quorum: leader %d, epoch %d, high watermark %d, max follower lag %d\n", q.Leader, q.Epoch, q.HighWatermark, maxLag)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "NODE\tROLE\tLOG-END\tLAG\tLAST-FETCH\tLAST-CAUGHT-UP\t")
		row := func(m quorumMember, role string) {
			end, lag := "-", "-"
			if m.LogEnd >= 0 {
				end = strconv.FormatInt(m.LogEnd, 10)
				if leaderEnd >= 0 {
					lag = strconv.FormatInt(leaderEnd-m.LogEnd, 10)
				}
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t\n", m.ID, role, end, lag, age(now, m.LastFetch), age(now, m.LastCaughtUp))
		}
		for _, m := range q.Voters {
			role := "voter"
			if m.ID == q.Leader {
				role = "leader"
			}
			row(m, role)
		}
		for _, m := range q.Observers {
			row(m, "observer")
		}
		tw.Flush()
	case v.NoQuorum != "":
		fmt.Fprintf(w, "Quorum: none: %s\n", v.NoQuorum)
	default:
		fmt.Fprintf(w, "Quorum: unknown\n")
	}

	fmt.Fprintf(w, "\nBrokers: %d\n", len(v.Brokers))
	if len(v.Brokers) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tADDRESS\tRACK\tSTATE")
		for _, b := range v.Brokers {
			state := "alive"
			if b.Fenced {
				state = "fenced"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", b.ID, net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))), orDash(b.Rack), state)
		}
		tw.Flush()
	}

	health := func(title string, ps []partitionHealth) {
		if len(ps) == 0 {
			fmt.Fprintf(w, "\n%s: none\n", title)
			return
		}
		fmt.Fprintf(w, "\n%s: %d\n", title, len(ps))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "TOPIC\tPARTITION\tLEADER\tREPLICAS\tISR\tMIN-ISR")
		for _, p := range ps {
			leader, minISR := "none", "-"
			if p.Leader >= 0 {
				leader = strconv.Itoa(int(p.Leader))
			}
			if p.MinISR > 0 {
				minISR = strconv.Itoa(p.MinISR)
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", p.Topic, p.Partition, leader, nodeList(p.Replicas), nodeList(p.ISR), minISR)
		}
		tw.Flush()
	}
	health("Under-replicated partitions (fewer in-sync replicas than replicas)", v.UnderReplicated)
	health("Under-min-ISR partitions (fewer in-sync replicas than min.insync.replicas)", v.UnderMinISR)
	health("Offline partitions (no leader)", v.Offline)
}

// age spells how long before now a Unix-ms timestamp was ("-" if
// unknown, -1); a timestamp ahead of this machine's clock counts as now.
func age(now time.Time, ms int64) string {
	if ms < 0 {
		return "-"
	}
	d := max(now.Sub(time.UnixMilli(ms)), 0)
	if d >= time.Second {
		d = d.Round(100 * time.Millisecond)
	} else {
		d = d.Round(time.Millisecond)
	}
	return d.String() + " ago"
}

// topicPartitions is the partitions of a topic, from Metadata: all of
// them, or the one named (partition >= 0), which must exist.
func (a *adminClient) topicPartitions(ctx context.Context, topic string, partition int32) ([]int32, error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	req.AllowAutoTopicCreation = false
	resp, err := req.RequestWith(ctx, a.cl)
	if err != nil {
		return nil, a.failed(ctx, err)
	}
	if len(resp.Topics) != 1 {
		return nil, fmt.Errorf("topic %q: the broker answered for %d topics", topic, len(resp.Topics))
	}
	t := resp.Topics[0]
	if t.ErrorCode != 0 {
		return nil, newKafkaError(topic, t.ErrorCode, nil)
	}
	var out []int32
	for _, p := range t.Partitions {
		if partition < 0 || p.Partition == partition {
			out = append(out, p.Partition)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("topic %q has no partition %d (it has %d)", topic, partition, len(t.Partitions))
	}
	slices.Sort(out)
	return out, nil
}

func runClusterLogDirs(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, cf := newClusterFlagSet("log-dirs", "--bootstrap-server HOST:PORT[,HOST:PORT...] [--topic T] [--broker N] [flags]",
		"Describes each broker's log directory (a spool broker's data directory), like kafka-log-dirs:\n"+
			"its path and the total and usable bytes of its file system, then a table of the\n"+
			"replicas it holds - each with its size in bytes and its offset lag (how far its log end\n"+
			"is behind the high watermark: 0 on a leader; on a follower catching up, what it has yet\n"+
			"to copy). --topic limits the replicas to one topic's, --broker the brokers to one.\n"+
			"Exit status 1 if a broker could not describe its directory.", stderr)
	topic := fs.String("topic", "", "only the replicas of this topic")
	broker := fs.Int("broker", -1, "only this broker's directory (its node id)")
	if code, ok := parseArgs(fs, args); !ok {
		return code
	}
	if code, ok := cf.check(); !ok {
		return code
	}
	a, ctx, cancel, ok := cf.dial(ctx, "spool cluster log-dirs", stderr)
	if !ok {
		return exitProblem
	}
	defer cancel()
	defer a.Close()
	fail := func(err error) int {
		fmt.Fprintf(stderr, "spool cluster log-dirs: %v\n", err)
		return exitProblem
	}
	if *topic != "" {
		// The topic must exist; every broker is asked for every replica
		// and the topic's are picked here, so that a replica on a broker
		// that is down (not in Metadata) is skipped rather than asked for.
		if _, err := a.topicPartitions(ctx, *topic, -1); err != nil {
			return fail(err)
		}
	}
	type answer struct {
		broker int32
		dirs   []kmsg.DescribeLogDirsResponseDir
	}
	var answers []answer
	code := exitOK
	for _, shard := range a.cl.RequestSharded(ctx, kmsg.NewPtrDescribeLogDirsRequest()) { // null topics: every replica, every live broker
		if shard.Err != nil {
			fmt.Fprintf(stderr, "spool cluster log-dirs: broker %d: %v\n", shard.Meta.NodeID, a.failed(ctx, shard.Err))
			code = exitProblem
			continue
		}
		resp := shard.Resp.(*kmsg.DescribeLogDirsResponse)
		if resp.ErrorCode != 0 {
			fmt.Fprintf(stderr, "spool cluster log-dirs: broker %d: %v\n", shard.Meta.NodeID, newKafkaError("", resp.ErrorCode, nil).asCluster())
			code = exitProblem
			continue
		}
		if *broker >= 0 && shard.Meta.NodeID != int32(*broker) {
			continue
		}
		if *topic != "" {
			held := false
			for i := range resp.Dirs {
				resp.Dirs[i].Topics = slices.DeleteFunc(resp.Dirs[i].Topics, func(t kmsg.DescribeLogDirsResponseDirTopic) bool { return t.Topic != *topic })
				held = held || len(resp.Dirs[i].Topics) > 0
			}
			if !held && *broker < 0 {
				continue // a broker without the topic's replicas
			}
		}
		answers = append(answers, answer{shard.Meta.NodeID, resp.Dirs})
	}
	if *broker >= 0 && len(answers) == 0 && code == exitOK {
		return fail(fmt.Errorf("no broker %d answered (--broker)", *broker))
	}
	slices.SortFunc(answers, func(x, y answer) int { return cmp.Compare(x.broker, y.broker) })
	for i, an := range answers {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		for _, d := range an.dirs {
			if d.ErrorCode != 0 {
				fmt.Fprintf(stdout, "Broker %d: %s: offline\n", an.broker, d.Dir)
				fmt.Fprintf(stderr, "spool cluster log-dirs: broker %d: %s: %v\n", an.broker, d.Dir, newKafkaError("", d.ErrorCode, nil).asCluster())
				code = exitProblem
				continue
			}
			fmt.Fprintf(stdout, "Broker %d: %s (total %s, usable %s)\n", an.broker, d.Dir, byteCount(d.TotalBytes), byteCount(d.UsableBytes))
			tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "TOPIC\tPARTITION\tSIZE\tOFFSET-LAG\tFUTURE\t")
			topics := slices.Clone(d.Topics)
			slices.SortFunc(topics, func(x, y kmsg.DescribeLogDirsResponseDirTopic) int { return strings.Compare(x.Topic, y.Topic) })
			for _, t := range topics {
				ps := slices.Clone(t.Partitions)
				slices.SortFunc(ps, func(x, y kmsg.DescribeLogDirsResponseDirTopicPartition) int {
					return cmp.Compare(x.Partition, y.Partition)
				})
				for _, p := range ps {
					fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%v\t\n", t.Topic, p.Partition, p.Size, p.OffsetLag, p.IsFuture)
				}
			}
			tw.Flush()
		}
	}
	return code
}

// byteCount spells a byte count in binary units ("unknown" for -1).
func byteCount(n int64) string {
	if n < 0 {
		return "unknown"
	}
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func runClusterProducers(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, cf := newClusterFlagSet("producers", "--bootstrap-server HOST:PORT[,HOST:PORT...] --topic T [--partition P] [flags]",
		"Lists the active idempotent producers of a topic's partitions, as each partition's leader\n"+
			"knows them, like kafka-transactions describe-producers: the producer id and epoch, the\n"+
			"sequence of its last record, when it last wrote, and its transaction's coordinator epoch\n"+
			"and start offset (-1: none). Exit status 1 if a partition could not be described.", stderr)
	topic := fs.String("topic", "", "the topic (required)")
	partition := fs.Int("partition", -1, "only this partition")
	if code, ok := parseArgs(fs, args); !ok {
		return code
	}
	if code, ok := cf.check(); !ok {
		return code
	}
	if *topic == "" {
		return usageError(fs, "--topic is required")
	}
	a, ctx, cancel, ok := cf.dial(ctx, "spool cluster producers", stderr)
	if !ok {
		return exitProblem
	}
	defer cancel()
	defer a.Close()
	parts, err := a.topicPartitions(ctx, *topic, int32(*partition))
	if err != nil {
		fmt.Fprintf(stderr, "spool cluster producers: %v\n", err)
		return exitProblem
	}
	req := kmsg.NewPtrDescribeProducersRequest()
	req.Topics = []kmsg.DescribeProducersRequestTopic{{Topic: *topic, Partitions: parts}}
	type row struct {
		partition, leader int32
		p                 kmsg.DescribeProducersResponseTopicPartitionActiveProducer
	}
	var rows []row
	answered := map[int32]bool{}
	code := exitOK
	for _, shard := range a.cl.RequestSharded(ctx, req) {
		if shard.Err != nil {
			// No leader to ask (franz-go names none), or it did not answer.
			err := a.failed(ctx, shard.Err)
			if r, ok := shard.Req.(*kmsg.DescribeProducersRequest); ok {
				for _, rt := range r.Topics {
					for _, p := range rt.Partitions {
						answered[p] = true
						fmt.Fprintf(stderr, "spool cluster producers: partition %d: %v\n", p, err)
					}
				}
			}
			code = exitProblem
			continue
		}
		for _, rt := range shard.Resp.(*kmsg.DescribeProducersResponse).Topics {
			for _, rp := range rt.Partitions {
				answered[rp.Partition] = true
				if rp.ErrorCode != 0 {
					fmt.Fprintf(stderr, "spool cluster producers: partition %d: %v\n", rp.Partition, newKafkaError(rt.Topic, rp.ErrorCode, rp.ErrorMessage))
					code = exitProblem
					continue
				}
				for _, p := range rp.ActiveProducers {
					rows = append(rows, row{rp.Partition, shard.Meta.NodeID, p})
				}
			}
		}
	}
	for _, p := range parts {
		if !answered[p] && code == exitOK {
			fmt.Fprintf(stderr, "spool cluster producers: partition %d: no leader answered\n", p)
			code = exitProblem
		}
	}
	slices.SortFunc(rows, func(x, y row) int {
		return cmp.Or(cmp.Compare(x.partition, y.partition), cmp.Compare(x.p.ProducerID, y.p.ProducerID))
	})
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "PARTITION\tLEADER\tPRODUCER-ID\tEPOCH\tLAST-SEQUENCE\tLAST-TIMESTAMP\tCOORDINATOR-EPOCH\tTXN-START-OFFSET\t")
	for _, r := range rows {
		ts := "-"
		if r.p.LastTimestamp >= 0 {
			ts = time.UnixMilli(r.p.LastTimestamp).UTC().Format("2006-01-02T15:04:05.000Z")
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%s\t%d\t%d\t\n", r.partition, r.leader, r.p.ProducerID, r.p.ProducerEpoch,
			r.p.LastSequence, ts, r.p.CoordinatorEpoch, r.p.CurrentTxnStartOffset)
	}
	tw.Flush()
	return code
}

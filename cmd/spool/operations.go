package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The operations an operator runs on a live cluster, over the Kafka
// protocol (--bootstrap-server), as Kafka's tools run them:
//
//	spool partitions reassign|reassignments|cancel    kafka-reassign-partitions
//	spool leaders elect                              kafka-leader-election
//	spool brokers unregister                         kafka-cluster unregister
//
// Any broker takes the requests (it forwards them to the active
// controller); kgo sends them to the controller the brokers name.

var partitionsCommands = []subcommand{
	{"reassign", "move partitions to other replicas (a target per partition, or a JSON plan)", runPartitionsReassign},
	{"reassignments", "list the reassignments under way", runPartitionsReassignments},
	{"cancel", "cancel reassignments under way: back to the replicas before them", runPartitionsCancel},
}

func runPartitions(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	return runSubcommand(ctx, "partitions", "--bootstrap-server HOST:PORT [flags]",
		"Moves partitions between the brokers of a running cluster, like kafka-reassign-partitions:\n"+
			"the new replicas catch up as followers, and only once they are all in sync do the\n"+
			"replicas they replace leave.",
		partitionsCommands, args, stdout, stderr)
}

var leadersCommands = []subcommand{
	{"elect", "elect leaders: the preferred replicas, or (unclean) any replica of a partition without one", runLeadersElect},
}

func runLeaders(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	return runSubcommand(ctx, "leaders", "--bootstrap-server HOST:PORT [flags]",
		"Elects partition leaders in a running cluster, like kafka-leader-election.", leadersCommands, args, stdout, stderr)
}

var brokersCommands = []subcommand{
	{"unregister", "remove a decommissioned broker's registration", runBrokersUnregister},
}

func runBrokers(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	return runSubcommand(ctx, "brokers", "--bootstrap-server HOST:PORT [flags]",
		"Manages the brokers of a running cluster, like kafka-cluster.", brokersCommands, args, stdout, stderr)
}

// opFlags are the flags of every operation: where the cluster is and how
// long to wait for it.
type opFlags struct {
	fs        *flag.FlagSet
	bootstrap string
	timeout   time.Duration
	servers   []string
	sec       *clientSecurity
}

func newOpFlagSet(group, name, args, doc string, stderr io.Writer) (*flag.FlagSet, *opFlags) {
	fs := flag.NewFlagSet(group+" "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	of := &opFlags{fs: fs}
	fs.StringVar(&of.bootstrap, "bootstrap-server", "", "the running cluster, `host:port[,host:port...]` (one or more of its brokers); required")
	fs.DurationVar(&of.timeout, "timeout", defaultAdminTimeout, "how long to wait for the brokers to answer")
	of.sec = addClientSecurityFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: spool %s %s %s\n\n%s\n\nFlags:\n", group, name, args, doc)
		printFlags(fs)
	}
	return fs, of
}

// check validates the common flags after parsing; ok false returns code.
func (of *opFlags) check() (code int, ok bool) {
	if of.bootstrap == "" {
		return usageError(of.fs, "--bootstrap-server is required"), false
	}
	if of.timeout <= 0 {
		return usageError(of.fs, "--timeout must be positive, not %v", of.timeout), false
	}
	for _, s := range strings.Split(of.bootstrap, ",") {
		if _, port, err := splitHostPort(s); err != nil || port == 0 {
			return usageError(of.fs, "--bootstrap-server %q: want HOST:PORT[,HOST:PORT...] with non-zero ports", of.bootstrap), false
		}
		of.servers = append(of.servers, s)
	}
	return exitOK, true
}

func (of *opFlags) dial(ctx context.Context, name string, stderr io.Writer) (*adminClient, context.Context, context.CancelFunc, bool) {
	a, err := newAdminClient(of.servers, of.timeout, of.sec)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return nil, nil, nil, false
	}
	ctx, cancel := context.WithTimeout(ctx, of.timeout)
	return a, ctx, cancel, true
}

// parseIDs parses a comma-separated list of broker ids.
func parseIDs(s string) ([]int32, error) {
	var out []int32
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		n, err := strconv.ParseInt(f, 10, 32)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q is not a broker id", f)
		}
		out = append(out, int32(n))
	}
	return out, nil
}

// partitionFlag is --partition: unset is -1.
func partitionFlag(fs *flag.FlagSet, usage string) *int64 {
	return fs.Int64("partition", -1, usage)
}

// reassignmentPlan is kafka-reassign-partitions' JSON plan:
//
//	{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2,3]}, ...]}
//
// ("log_dirs" is accepted and ignored: spool has one data directory).
type reassignmentPlan struct {
	Version    int `json:"version"`
	Partitions []struct {
		Topic     string  `json:"topic"`
		Partition *int32  `json:"partition"`
		Replicas  []int32 `json:"replicas"`
		LogDirs   []any   `json:"log_dirs,omitempty"`
	} `json:"partitions"`
}

// readPlan reads a JSON plan; cancel plans need no replicas.
func readPlan(path string, needReplicas bool) ([]reassignment, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var plan reassignmentPlan
	dec := json.NewDecoder(strings.NewReader(string(data)))
	if err := dec.Decode(&plan); err != nil {
		return nil, fmt.Errorf("%s: not a reassignment plan: %v", path, err)
	}
	if plan.Version != 1 {
		return nil, fmt.Errorf("%s: version %d; want 1", path, plan.Version)
	}
	if len(plan.Partitions) == 0 {
		return nil, fmt.Errorf("%s: no partitions", path)
	}
	var out []reassignment
	seen := map[string]bool{}
	for i, p := range plan.Partitions {
		switch {
		case p.Topic == "" || p.Partition == nil:
			return nil, fmt.Errorf("%s: partition %d of the plan needs a topic and a partition", path, i)
		case *p.Partition < 0:
			return nil, fmt.Errorf("%s: %s-%d: a partition is not negative", path, p.Topic, *p.Partition)
		case needReplicas && len(p.Replicas) == 0:
			return nil, fmt.Errorf("%s: %s-%d has no replicas", path, p.Topic, *p.Partition)
		}
		key := fmt.Sprintf("%s-%d", p.Topic, *p.Partition)
		if seen[key] {
			return nil, fmt.Errorf("%s: %s is in the plan twice", path, key)
		}
		seen[key] = true
		r := reassignment{topic: p.Topic, partition: *p.Partition, replicas: p.Replicas}
		if !needReplicas {
			r.replicas = nil
		}
		out = append(out, r)
	}
	return out, nil
}

// reassignment is one partition's target (nil replicas: cancel).
type reassignment struct {
	topic     string
	partition int32
	replicas  []int32
}

func (r reassignment) String() string { return fmt.Sprintf("%s-%d", r.topic, r.partition) }

// alterReassignments sends the reassignments (or cancellations) in one
// request and returns each one's error.
func (a *adminClient) alterReassignments(ctx context.Context, rs []reassignment) ([]error, error) {
	req := kmsg.NewPtrAlterPartitionAssignmentsRequest()
	req.TimeoutMillis = int32(a.timeout.Milliseconds())
	index := map[string]int{}
	for _, r := range rs {
		i, ok := index[r.topic]
		if !ok {
			i = len(req.Topics)
			index[r.topic] = i
			t := kmsg.NewAlterPartitionAssignmentsRequestTopic()
			t.Topic = r.topic
			req.Topics = append(req.Topics, t)
		}
		p := kmsg.NewAlterPartitionAssignmentsRequestTopicPartition()
		p.Partition, p.Replicas = r.partition, r.replicas
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, p)
	}
	resp, err := req.RequestWith(ctx, a.cl)
	if err != nil {
		return nil, a.failed(ctx, err)
	}
	if resp.ErrorCode != 0 {
		return nil, newKafkaError("", resp.ErrorCode, resp.ErrorMessage)
	}
	answers := map[string]error{}
	answered := map[string]bool{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			key := fmt.Sprintf("%s-%d", t.Topic, p.Partition)
			answered[key] = true
			if p.ErrorCode != 0 {
				answers[key] = newKafkaError(t.Topic, p.ErrorCode, p.ErrorMessage)
			}
		}
	}
	errs := make([]error, len(rs))
	for i, r := range rs {
		if !answered[r.String()] {
			errs[i] = fmt.Errorf("partition %s: the broker did not answer for it", r)
			continue
		}
		errs[i] = answers[r.String()]
	}
	return errs, nil
}

// ongoing is a reassignment under way, as ListPartitionReassignments
// reports it.
type ongoing struct {
	topic                      string
	partition                  int32
	replicas, adding, removing []int32
}

// listReassignments lists the reassignments under way of topic (every
// topic if ""), of partition (every partition if negative).
func (a *adminClient) listReassignments(ctx context.Context, topic string, partition int64) ([]ongoing, error) {
	req := kmsg.NewPtrListPartitionReassignmentsRequest()
	req.TimeoutMillis = int32(a.timeout.Milliseconds())
	if topic != "" {
		parts, err := a.partitionsOf(ctx, topic, partition)
		if err != nil {
			return nil, err
		}
		t := kmsg.NewListPartitionReassignmentsRequestTopic()
		t.Topic, t.Partitions = topic, parts
		req.Topics = append(req.Topics, t)
	}
	resp, err := req.RequestWith(ctx, a.cl)
	if err != nil {
		return nil, a.failed(ctx, err)
	}
	if resp.ErrorCode != 0 {
		return nil, newKafkaError(topic, resp.ErrorCode, resp.ErrorMessage)
	}
	var out []ongoing
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			out = append(out, ongoing{topic: t.Topic, partition: p.Partition, replicas: p.Replicas, adding: p.AddingReplicas, removing: p.RemovingReplicas})
		}
	}
	slices.SortFunc(out, func(x, y ongoing) int {
		if c := strings.Compare(x.topic, y.topic); c != 0 {
			return c
		}
		return int(x.partition - y.partition)
	})
	return out, nil
}

// partitionsOf is the partitions of a topic (from Metadata), or just
// partition if it is not negative; an unknown topic or partition is an
// error.
func (a *adminClient) partitionsOf(ctx context.Context, topic string, partition int64) ([]int32, error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
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
	var parts []int32
	for _, p := range t.Partitions {
		if partition < 0 || int64(p.Partition) == partition {
			parts = append(parts, p.Partition)
		}
	}
	if partition >= 0 && len(parts) == 0 {
		return nil, newKafkaError(topic, kerr.UnknownTopicOrPartition.Code, kmsg.StringPtr(fmt.Sprintf("the topic has %d partitions; there is no partition %d", len(t.Partitions), partition)))
	}
	slices.Sort(parts)
	return parts, nil
}

// joinIDs prints broker ids as kafka-reassign-partitions does: 1,2,3.
func joinIDs(ids []int32) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(int(id))
	}
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ",")
}

func runPartitionsReassign(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, of := newOpFlagSet("partitions", "reassign", "--bootstrap-server HOST:PORT (--topic T --partition P --replicas IDS | --reassignment-json-file FILE) [--wait]",
		"Moves partitions to target replicas, in the order given (the first is the preferred leader).\n"+
			"The added replicas are created on their brokers and copy the partition as followers;\n"+
			"once they are all in sync the reassignment completes: the replaced replicas leave (and\n"+
			"are deleted), and a leader that is replaced hands over to the first target replica in\n"+
			"sync. A target that only removes or reorders replicas takes effect at once. A plan file\n"+
			"is kafka-reassign-partitions' JSON: {\"version\":1,\"partitions\":[{\"topic\":\"t\",\"partition\":0,\"replicas\":[1,2,3]}]}.\n"+
			"Prints a line per partition; exit status 1 if the cluster refused any.", stderr)
	topic := fs.String("topic", "", "the `topic` of the partition to move")
	partition := partitionFlag(fs, "the `partition` to move")
	replicas := fs.String("replicas", "", "the target replicas, broker `ids` separated by commas (e.g. 1,2,4)")
	plan := fs.String("reassignment-json-file", "", "a JSON reassignment plan `file`, instead of --topic, --partition and --replicas")
	wait := fs.Bool("wait", false, "wait (up to --timeout) until every reassignment started has completed, and print how long it took")
	if code, ok := parseArgs(fs, args); !ok {
		return code
	}
	var rs []reassignment
	switch {
	case *plan != "" && (*topic != "" || *partition >= 0 || *replicas != ""):
		return usageError(fs, "--reassignment-json-file replaces --topic, --partition and --replicas")
	case *plan != "":
		var err error
		if rs, err = readPlan(*plan, true); err != nil {
			return usageError(fs, "--reassignment-json-file: %v", err)
		}
	case *topic == "" || *replicas == "":
		return usageError(fs, "give --topic, --partition and --replicas, or --reassignment-json-file")
	case *partition < 0 || *partition > math.MaxInt32:
		return usageError(fs, "--partition is required: a partition number from 0")
	default:
		ids, err := parseIDs(*replicas)
		if err != nil {
			return usageError(fs, "--replicas: %v", err)
		}
		rs = []reassignment{{topic: *topic, partition: int32(*partition), replicas: ids}}
	}
	if code, ok := of.check(); !ok {
		return code
	}
	name := "spool partitions reassign"
	a, ctx, cancel, ok := of.dial(ctx, name, stderr)
	if !ok {
		return exitProblem
	}
	defer cancel()
	defer a.Close()
	start := time.Now()
	errs, err := a.alterReassignments(ctx, rs)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitProblem
	}
	code := exitOK
	var started []reassignment
	for i, r := range rs {
		if errs[i] != nil {
			fmt.Fprintf(stderr, "%s: partition %s: %v\n", name, r, errs[i])
			code = exitProblem
			continue
		}
		started = append(started, r)
		fmt.Fprintf(stdout, "Reassignment of partition %s to replicas %s started.\n", r, joinIDs(r.replicas))
	}
	if !*wait || len(started) == 0 {
		return code
	}
	if err := a.waitReassigned(ctx, started); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitProblem
	}
	fmt.Fprintf(stdout, "Reassignment of %d partition(s) completed in %v.\n", len(started), time.Since(start).Round(time.Millisecond))
	return code
}

// waitReassigned waits until none of rs is under way.
func (a *adminClient) waitReassigned(ctx context.Context, rs []reassignment) error {
	want := map[string]bool{}
	for _, r := range rs {
		want[r.String()] = true
	}
	for {
		list, err := a.listReassignments(ctx, "", -1)
		if err != nil {
			return err
		}
		var left []string
		for _, o := range list {
			if key := fmt.Sprintf("%s-%d", o.topic, o.partition); want[key] {
				left = append(left, key)
			}
		}
		if len(left) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: still under way after %v (--timeout): %s", errNoAnswer, a.timeout, strings.Join(left, ", "))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func runPartitionsReassignments(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, of := newOpFlagSet("partitions", "reassignments", "--bootstrap-server HOST:PORT [--topic T [--partition P]]",
		"Lists the reassignments under way: per partition its replicas (the target's, then those\n"+
			"being replaced), the replicas being added and those being removed. Nothing under way:\n"+
			"a line saying so.", stderr)
	topic := fs.String("topic", "", "only this `topic`'s partitions")
	partition := partitionFlag(fs, "only this `partition` of --topic")
	if code, ok := parseArgs(fs, args); !ok {
		return code
	}
	if *partition >= 0 && *topic == "" {
		return usageError(fs, "--partition needs --topic")
	}
	if code, ok := of.check(); !ok {
		return code
	}
	name := "spool partitions reassignments"
	a, ctx, cancel, ok := of.dial(ctx, name, stderr)
	if !ok {
		return exitProblem
	}
	defer cancel()
	defer a.Close()
	list, err := a.listReassignments(ctx, *topic, *partition)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitProblem
	}
	if len(list) == 0 {
		fmt.Fprintln(stdout, "No reassignment is under way.")
		return exitOK
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tREPLICAS\tADDING\tREMOVING")
	for _, o := range list {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", o.topic, o.partition, joinIDs(o.replicas), joinIDs(o.adding), joinIDs(o.removing))
	}
	tw.Flush()
	return exitOK
}

func runPartitionsCancel(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, of := newOpFlagSet("partitions", "cancel", "--bootstrap-server HOST:PORT (--topic T --partition P | --reassignment-json-file FILE)",
		"Cancels reassignments under way: the replicas they were adding leave (and are deleted),\n"+
			"those they were replacing stay. With a plan file, cancels each partition it names.\n"+
			"Exit status 1 if any partition has no reassignment under way, or the cluster refused.", stderr)
	topic := fs.String("topic", "", "the `topic` of the partition")
	partition := partitionFlag(fs, "the `partition` whose reassignment to cancel")
	plan := fs.String("reassignment-json-file", "", "cancel the reassignments of the partitions of this JSON plan `file`")
	if code, ok := parseArgs(fs, args); !ok {
		return code
	}
	var rs []reassignment
	switch {
	case *plan != "" && (*topic != "" || *partition >= 0):
		return usageError(fs, "--reassignment-json-file replaces --topic and --partition")
	case *plan != "":
		var err error
		if rs, err = readPlan(*plan, false); err != nil {
			return usageError(fs, "--reassignment-json-file: %v", err)
		}
	case *topic == "" || *partition < 0 || *partition > math.MaxInt32:
		return usageError(fs, "give --topic and --partition, or --reassignment-json-file")
	default:
		rs = []reassignment{{topic: *topic, partition: int32(*partition)}}
	}
	if code, ok := of.check(); !ok {
		return code
	}
	name := "spool partitions cancel"
	a, ctx, cancel, ok := of.dial(ctx, name, stderr)
	if !ok {
		return exitProblem
	}
	defer cancel()
	defer a.Close()
	errs, err := a.alterReassignments(ctx, rs)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitProblem
	}
	code := exitOK
	for i, r := range rs {
		if errs[i] != nil {
			fmt.Fprintf(stderr, "%s: partition %s: %v\n", name, r, errs[i])
			code = exitProblem
			continue
		}
		fmt.Fprintf(stdout, "Reassignment of partition %s cancelled.\n", r)
	}
	return code
}

func runLeadersElect(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, of := newOpFlagSet("leaders", "elect", "--bootstrap-server HOST:PORT --type preferred|unclean [--topic T [--partition P]]",
		"Elects leaders, like kafka-leader-election: preferred moves each partition's leadership\n"+
			"to its preferred (first) replica if that replica is in sync; unclean elects a leader\n"+
			"for a partition that has none, from outside the ISR if no in-sync replica can lead -\n"+
			"records only the old ISR held are then lost. Without --topic, every partition.\n"+
			"Prints a line per partition; a partition that needed no election is not an error,\n"+
			"any other refusal is (exit status 1).", stderr)
	typ := fs.String("type", "", "the election: `preferred` or unclean")
	topic := fs.String("topic", "", "only this `topic`'s partitions")
	partition := partitionFlag(fs, "only this `partition` of --topic")
	if code, ok := parseArgs(fs, args); !ok {
		return code
	}
	var electionType int8
	switch *typ {
	case "preferred":
	case "unclean":
		electionType = 1
	case "":
		return usageError(fs, "--type is required: preferred or unclean")
	default:
		return usageError(fs, "--type %q: want preferred or unclean", *typ)
	}
	if *partition >= 0 && *topic == "" {
		return usageError(fs, "--partition needs --topic")
	}
	if *partition > math.MaxInt32 {
		return usageError(fs, "--partition %d is out of range", *partition)
	}
	if code, ok := of.check(); !ok {
		return code
	}
	name := "spool leaders elect"
	a, ctx, cancel, ok := of.dial(ctx, name, stderr)
	if !ok {
		return exitProblem
	}
	defer cancel()
	defer a.Close()
	req := kmsg.NewPtrElectLeadersRequest()
	req.ElectionType = electionType
	req.TimeoutMillis = int32(a.timeout.Milliseconds())
	if *topic != "" {
		parts, err := a.partitionsOf(ctx, *topic, *partition)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return exitProblem
		}
		req.Topics = []kmsg.ElectLeadersRequestTopic{{Topic: *topic, Partitions: parts}}
	}
	resp, err := req.RequestWith(ctx, a.cl)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, a.failed(ctx, err))
		return exitProblem
	}
	if resp.ErrorCode != 0 {
		fmt.Fprintf(stderr, "%s: %v\n", name, newKafkaError(*topic, resp.ErrorCode, nil))
		return exitProblem
	}
	code, elected := exitOK, 0
	for _, t := range resp.Topics {
		slices.SortFunc(t.Partitions, func(x, y kmsg.ElectLeadersResponseTopicPartition) int { return int(x.Partition - y.Partition) })
		for _, p := range t.Partitions {
			switch err := kerr.ErrorForCode(p.ErrorCode); {
			case err == nil:
				elected++
				fmt.Fprintf(stdout, "Elected a leader (%s) for partition %s-%d.\n", *typ, t.Topic, p.Partition)
			case errors.Is(err, kerr.ElectionNotNeeded):
				fmt.Fprintf(stdout, "Partition %s-%d needs no election: its leader is the one asked for.\n", t.Topic, p.Partition)
			default:
				fmt.Fprintf(stderr, "%s: partition %d: %v\n", name, p.Partition, newKafkaError(t.Topic, p.ErrorCode, p.ErrorMessage))
				code = exitProblem
			}
		}
	}
	if *topic == "" && elected == 0 && code == exitOK {
		fmt.Fprintln(stdout, "No partition needed an election.")
	}
	return code
}

func runBrokersUnregister(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, of := newOpFlagSet("brokers", "unregister", "--bootstrap-server HOST:PORT --id N",
		"Removes a decommissioned broker's registration (kafka-cluster unregister), the last step\n"+
			"of taking it out of the cluster: first reassign its replicas to other brokers (see\n"+
			"\"spool partitions reassign\"), then stop it, then unregister it. The cluster refuses\n"+
			"while it holds a replica or runs (its session lasts --session-timeout after it stops).", stderr)
	id := fs.Int64("id", -1, "the broker's `id`")
	if code, ok := parseArgs(fs, args); !ok {
		return code
	}
	if *id < 0 || *id > math.MaxInt32 {
		return usageError(fs, "--id is required: a broker id from 0")
	}
	if code, ok := of.check(); !ok {
		return code
	}
	name := "spool brokers unregister"
	a, ctx, cancel, ok := of.dial(ctx, name, stderr)
	if !ok {
		return exitProblem
	}
	defer cancel()
	defer a.Close()
	req := kmsg.NewPtrUnregisterBrokerRequest()
	req.BrokerID = int32(*id)
	resp, err := req.RequestWith(ctx, a.cl)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, a.failed(ctx, err))
		return exitProblem
	}
	if resp.ErrorCode != 0 {
		fmt.Fprintf(stderr, "%s: broker %d: %v\n", name, *id, newKafkaError("", resp.ErrorCode, resp.ErrorMessage))
		return exitProblem
	}
	fmt.Fprintf(stdout, "Broker %d unregistered.\n", *id)
	return exitOK
}

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/record"
)

// topicsCommands are the subcommands of "spool topics".
var topicsCommands = []subcommand{
	{"create", "create a topic", runTopicsCreate},
	{"list", "list the topics' names", runTopicsList},
	{"describe", "describe a topic or every topic: settings, and per partition leader, replicas, ISR and offsets", runTopicsDescribe},
	{"delete", "delete a topic and its data", runTopicsDelete},
}

// runTopics implements "spool topics": it dispatches to create, list,
// describe or delete.
func runTopics(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	return runSubcommand(ctx, "topics", "[flags]",
		"Manages topics, like kafka-topics: those of a data directory no server holds (--data),\n"+
			"or, with --bootstrap-server HOST:PORT[,HOST:PORT...], those of a running broker or\n"+
			"cluster (spool serve, or any Kafka cluster), over the Kafka protocol.",
		topicsCommands, args, stdout, stderr)
}

// defaultAdminTimeout bounds a --bootstrap-server command's requests
// unless --timeout says otherwise.
const defaultAdminTimeout = 30 * time.Second

// topicsFlags are the flags every "spool topics" command has: --data,
// which opens a data directory, or --bootstrap-server, which reaches a
// running broker or cluster instead. None takes --flush: no topics command
// appends records.
type topicsFlags struct {
	*brokerFlags
	fs        *flag.FlagSet
	bootstrap string
	timeout   time.Duration
	servers   []string // parsed from bootstrap by mode
	sec       *clientSecurity
}

// newTopicsFlagSet returns the flag set of "spool topics NAME", with
// --data, --bootstrap-server, its security flags and --timeout defined.
func newTopicsFlagSet(name, args, doc string, stderr io.Writer) (*flag.FlagSet, *topicsFlags) {
	fs, bf := newSubcommandFlagSet("topics", name, args, doc, withoutFlush, stderr)
	bf.remote = "--bootstrap-server"
	tf := &topicsFlags{brokerFlags: bf, fs: fs}
	fs.StringVar(&tf.bootstrap, "bootstrap-server", "", "instead of opening --data, reach a running broker or cluster over the Kafka protocol at `host:port[,host:port...]` (one or more of its brokers)")
	tf.sec = addClientSecurityFlags(fs)
	fs.DurationVar(&tf.timeout, "timeout", defaultAdminTimeout, "with --bootstrap-server: how long to wait for the brokers to answer")
	return fs, tf
}

// mode reports, once the flags are parsed, whether the command is to reach
// brokers over the network (--bootstrap-server) rather than open a data
// directory. Flags of the other mode are usage errors: --data with
// --bootstrap-server, and without it --timeout, the security flags and
// remoteOnly flags (those only a server takes). ok is false, with the
// exit status in code, after a usage error.
func (tf *topicsFlags) mode(remoteOnly ...string) (remote bool, code int, ok bool) {
	set := setFlags(tf.fs)
	if tf.bootstrap == "" {
		code, ok := requireFlag(tf.fs, false, "bootstrap-server", append(append(remoteOnly, "timeout"), clientSecurityFlags...)...)
		return false, code, ok
	}
	if set["data"] {
		return false, usageError(tf.fs, "--data opens a data directory; with --bootstrap-server the brokers' own are used"), false
	}
	if tf.timeout <= 0 {
		return false, usageError(tf.fs, "--timeout must be positive, not %v", tf.timeout), false
	}
	for _, s := range strings.Split(tf.bootstrap, ",") {
		if _, port, err := splitHostPort(s); err != nil || port == 0 {
			return false, usageError(tf.fs, "--bootstrap-server %q: want HOST:PORT[,HOST:PORT...] with non-zero ports", tf.bootstrap), false
		}
		tf.servers = append(tf.servers, s)
	}
	return true, exitOK, true
}

// dial returns an admin client of the --bootstrap-server brokers and a
// context bounded by --timeout, printing why not on stderr.
func (tf *topicsFlags) dial(ctx context.Context, name string, stderr io.Writer) (*adminClient, context.Context, context.CancelFunc, bool) {
	a, err := newAdminClient(tf.servers, tf.timeout, tf.sec)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return nil, nil, nil, false
	}
	ctx, cancel := context.WithTimeout(ctx, tf.timeout)
	return a, ctx, cancel, true
}

// createSettings maps the typed settings flags of "topics create" to
// Kafka's topic settings, for a CreateTopics request.
var createSettings = map[string]string{
	"retention-ms": "retention.ms", "retention-bytes": "retention.bytes", "segment-bytes": "segment.bytes",
	"max-message-bytes": "max.message.bytes", "compression": "compression.type",
}

func runTopicsCreate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, tf := newTopicsFlagSet("create", "--topic T [flags]",
		"Creates a topic. Settings left out take the broker's defaults (see \"spool topics describe\").\n"+
			"With --bootstrap-server the cluster creates it, placing --replication-factor replicas of\n"+
			"each partition on its brokers, and takes any Kafka topic setting with --config.", stderr)
	name := fs.String("topic", "", "the topic's `name`: 1 to 249 characters of [a-zA-Z0-9._-]")
	partitions := fs.Int("partitions", 0, "the number of partitions (default: the broker's, num.partitions, 1 unless configured)")
	rf := fs.Int("replication-factor", 0, "the `number` of replicas of each partition (default: the broker's, default.replication.factor); a data directory opened here has one")
	retentionMs := fs.Int64("retention-ms", 0, "delete segments whose newest record is older than this many `ms` (retention.ms); -1 keeps them, 0 takes the default (7 days)")
	retentionBytes := fs.Int64("retention-bytes", 0, "delete a partition's oldest segments while it is larger than this many `bytes` (retention.bytes); -1 or 0: unlimited")
	segmentBytes := fs.Int64("segment-bytes", 0, "roll a partition's segment at this many `bytes` (segment.bytes); 0 takes the default (1 GiB)")
	maxMessageBytes := fs.Int("max-message-bytes", 0, "the largest batch a partition takes, in `bytes` after compression (max.message.bytes); 0 takes the default (1 MiB)")
	var cfg spool.TopicConfig
	codecFlag(fs, &cfg.Compression, "the `codec` of the batches produced to the topic (compression.type): none, gzip, snappy, lz4 or zstd (default none)")
	var settings []topicSetting
	fs.Func("config", "with --bootstrap-server: a topic setting as Kafka names it, `name=value` (e.g. min.insync.replicas=2, cleanup.policy=compact); repeatable", func(s string) error {
		k, v, ok := strings.Cut(s, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return fmt.Errorf("want name=value")
		}
		for _, e := range settings {
			if e.name == k {
				return fmt.Errorf("%s is given twice", k)
			}
		}
		settings = append(settings, topicSetting{k, v})
		return nil
	})
	if code, ok := parseArgs(fs, args); !ok {
		return code
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case *name == "":
		return usageError(fs, "--topic is required")
	case set["partitions"] && (*partitions < 1 || *partitions > math.MaxInt32):
		return usageError(fs, "--partitions must be at least 1, not %d", *partitions)
	case set["replication-factor"] && (*rf < 1 || *rf > math.MaxInt16):
		return usageError(fs, "--replication-factor must be from 1 to %d, not %d", math.MaxInt16, *rf)
	case *retentionMs < -1:
		return usageError(fs, "--retention-ms must be -1 (unlimited), 0 (the default) or positive, not %d", *retentionMs)
	case *retentionMs > math.MaxInt64/int64(time.Millisecond):
		return usageError(fs, "--retention-ms %d is too large", *retentionMs)
	case *retentionBytes < -1:
		return usageError(fs, "--retention-bytes must be -1 (unlimited), 0 (the default) or positive, not %d", *retentionBytes)
	case *segmentBytes < 0:
		return usageError(fs, "--segment-bytes must not be negative")
	case *maxMessageBytes < 0:
		return usageError(fs, "--max-message-bytes must not be negative")
	}
	remote, code, ok := tf.mode("config")
	if !ok {
		return code
	}

	if remote {
		// The typed flags are Kafka settings too; 0 is "the default", as
		// for a data directory.
		values := map[string]string{
			"retention-ms": strconv.FormatInt(*retentionMs, 10), "retention-bytes": strconv.FormatInt(*retentionBytes, 10),
			"segment-bytes": strconv.FormatInt(*segmentBytes, 10), "max-message-bytes": strconv.Itoa(*maxMessageBytes),
			"compression": cfg.Compression.String(),
		}
		if cfg.Compression == record.None {
			values["compression"] = "uncompressed"
		}
		for _, flagName := range []string{"retention-ms", "retention-bytes", "segment-bytes", "max-message-bytes", "compression"} {
			if !set[flagName] || values[flagName] == "0" {
				continue
			}
			for _, s := range settings {
				if s.name == createSettings[flagName] {
					return usageError(fs, "--%s and --config %s=%s set the same setting", flagName, s.name, s.value)
				}
			}
			settings = append(settings, topicSetting{createSettings[flagName], values[flagName]})
		}
		a, ctx, cancel, ok := tf.dial(ctx, "spool topics create", stderr)
		if !ok {
			return exitProblem
		}
		defer cancel()
		defer a.Close()
		n, r := int32(-1), int16(-1) // the cluster's defaults
		if *partitions > 0 {
			n = int32(*partitions)
		}
		if *rf > 0 {
			r = int16(*rf)
		}
		if err := a.createTopic(ctx, *name, n, r, settings); err != nil {
			fmt.Fprintf(stderr, "spool topics create: %v\n", err)
			return exitProblem
		}
		fmt.Fprintf(stdout, "Created topic %s.\n", *name)
		return exitOK
	}

	cfg.Partitions = int32(*partitions)
	cfg.ReplicationFactor = *rf
	cfg.RetentionTime = time.Duration(*retentionMs) * time.Millisecond
	if *retentionMs == -1 {
		cfg.RetentionTime = log.Unlimited
	}
	cfg.RetentionBytes = *retentionBytes
	cfg.SegmentBytes = *segmentBytes
	cfg.MaxMessageBytes = *maxMessageBytes

	b, ok := tf.open("spool topics create", useOrCreate, stderr)
	if !ok {
		return exitProblem
	}
	code = exitOK
	if err := b.CreateTopic(ctx, *name, cfg); err != nil {
		fmt.Fprintf(stderr, "spool topics create: %v\n", err)
		code = exitProblem
	} else {
		fmt.Fprintf(stdout, "Created topic %s.\n", *name)
	}
	return closeBroker("spool topics create", b, code, stderr)
}

func runTopicsList(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, tf := newTopicsFlagSet("list", "[flags]", "Prints the topics' names, one a line, sorted.", stderr)
	if code, ok := parseArgs(fs, args); !ok {
		return code
	}
	remote, code, ok := tf.mode()
	if !ok {
		return code
	}
	if remote {
		a, ctx, cancel, ok := tf.dial(ctx, "spool topics list", stderr)
		if !ok {
			return exitProblem
		}
		defer cancel()
		defer a.Close()
		names, err := a.listTopics(ctx)
		if err != nil {
			fmt.Fprintf(stderr, "spool topics list: %v\n", err)
			return exitProblem
		}
		for _, name := range names {
			fmt.Fprintln(stdout, name)
		}
		return exitOK
	}
	b, ok := tf.open("spool topics list", useExisting, stderr)
	if !ok {
		return exitProblem
	}
	for _, name := range b.Topics() {
		fmt.Fprintln(stdout, name)
	}
	return closeBroker("spool topics list", b, exitOK, stderr)
}

func runTopicsDescribe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, tf := newTopicsFlagSet("describe", "[--topic T] [flags]",
		"Describes a topic, or every topic: a line with its ID, partition count, replication factor\n"+
			"and effective settings, then a table of its partitions: the leader (the broker that takes\n"+
			"writes; none while no in-sync replica is up), the leader epoch, the replicas (brokers\n"+
			"holding it, the preferred leader first), the ISR (replicas in sync), the offline\n"+
			"replicas (on brokers that are down), then the start offset (the first readable), end\n"+
			"offset (the next to be written) and high watermark (consumers read below it), and for a\n"+
			"data directory the bytes on disk and segment count. A data directory opened here is one\n"+
			"node (id 0): leader, only replica and ISR. With --bootstrap-server the brokers answer:\n"+
			"Metadata for the replicas, DescribeConfigs for the settings, ListOffsets to each leader\n"+
			"for the offsets. \"-\" is an empty list or an unknown value. A partition without a\n"+
			"leader (or whose log could not be opened) is OFFLINE, with the reason below the table.", stderr)
	name := fs.String("topic", "", "the topic to describe (default: every topic)")
	if code, ok := parseArgs(fs, args); !ok {
		return code
	}
	remote, code, ok := tf.mode()
	if !ok {
		return code
	}
	var names []string
	if *name != "" {
		names = []string{*name}
	}
	if remote {
		a, ctx, cancel, ok := tf.dial(ctx, "spool topics describe", stderr)
		if !ok {
			return exitProblem
		}
		defer cancel()
		defer a.Close()
		views, errs, err := a.describeTopics(ctx, names)
		if err != nil {
			fmt.Fprintf(stderr, "spool topics describe: %v\n", err)
			return exitProblem
		}
		return printTopics(stdout, stderr, views, errs)
	}
	b, ok := tf.open("spool topics describe", useExisting, stderr)
	if !ok {
		return exitProblem
	}
	if names == nil {
		names = b.Topics()
	}
	views := make([]topicView, len(names))
	errs := make([]error, len(names))
	for i, n := range names {
		d, err := b.DescribeTopic(n)
		if err != nil {
			errs[i] = err
			continue
		}
		views[i] = localView(d)
	}
	return closeBroker("spool topics describe", b, printTopics(stdout, stderr, views, errs), stderr)
}

// topicView is a topic as "spool topics describe" prints it, whether a
// data directory or the brokers described it.
type topicView struct {
	Name       string
	ID         string
	Configs    string // name=value,... in describedSettings' order
	Partitions []partitionView
	// OnDisk: the partitions' SIZE and SEGMENTS are known (a data
	// directory's).
	OnDisk bool
}

// partitionView is one partition of a topicView. Leader -1 is none.
type partitionView struct {
	Partition                      int32
	Leader                         int32
	LeaderEpoch                    int32 // -1: unknown
	Replicas, ISR, OfflineReplicas []int32
	// HasOffsets: StartOffset, EndOffset and HighWatermark are known.
	HasOffsets                            bool
	StartOffset, EndOffset, HighWatermark int64
	Size                                  int64
	Segments                              int
	// Problem, if not "", is why the partition is OFFLINE (no leader, a
	// log that could not be opened); OffsetsProblem why its offsets are
	// unknown although it has a leader.
	Problem, OffsetsProblem string
}

func (v *topicView) partition(n int32) *partitionView {
	for i := range v.Partitions {
		if v.Partitions[i].Partition == n {
			return &v.Partitions[i]
		}
	}
	return nil
}

// offsetsUnknown records why the partition's offsets could not be had.
func (p *partitionView) offsetsUnknown(why string) {
	p.HasOffsets = false
	if p.OffsetsProblem == "" {
		p.OffsetsProblem = why
	}
}

// localView is a topic as the data directory's broker describes it: a
// standalone broker is leader, only replica and ISR of each partition.
func localView(d spool.TopicDescription) topicView {
	v := topicView{Name: d.Name, ID: d.ID.String(), Configs: topicConfigs(d.Config), OnDisk: true}
	for _, p := range d.Partitions {
		pv := partitionView{
			Partition: p.Partition, Leader: p.Leader, LeaderEpoch: p.LeaderEpoch,
			Replicas: p.Replicas, ISR: p.ISR, OfflineReplicas: p.OfflineReplicas,
			HasOffsets: p.Offline == nil, StartOffset: p.StartOffset, EndOffset: p.EndOffset, HighWatermark: p.HighWatermark,
			Size: p.Size, Segments: p.Segments,
		}
		if p.Offline != nil {
			// Its only replica is on a log that failed: offline, as the
			// server reports it in Metadata.
			pv.Leader, pv.LeaderEpoch, pv.Problem = -1, -1, p.Offline.Error()
			if len(pv.OfflineReplicas) == 0 {
				pv.OfflineReplicas = pv.Replicas
			}
		}
		v.Partitions = append(v.Partitions, pv)
	}
	return v
}

// printTopics prints the topics described, a blank line between two, and
// the errors of those that could not be, on stderr. It returns the exit
// status: exitProblem if any could not be.
func printTopics(stdout, stderr io.Writer, views []topicView, errs []error) int {
	code, printed := exitOK, 0
	for i := range views {
		if errs[i] != nil {
			fmt.Fprintf(stderr, "spool topics describe: %v\n", errs[i])
			code = exitProblem
			continue
		}
		if printed > 0 {
			fmt.Fprintln(stdout)
		}
		printTopic(stdout, views[i])
		printed++
	}
	return code
}

// printTopic prints a topic's description: a line of the topic, as
// kafka-topics --describe has it, then a table of its partitions, then why
// each offline partition could not be opened or has no leader, and why
// offsets are missing where a leader did not give them.
func printTopic(w io.Writer, v topicView) {
	rf := 0
	if len(v.Partitions) > 0 {
		rf = len(v.Partitions[0].Replicas) // as kafka-topics counts it
	}
	fmt.Fprintf(w, "Topic: %s\tTopicId: %s\tPartitionCount: %d\tReplicationFactor: %d\tConfigs: %s\n",
		v.Name, v.ID, len(v.Partitions), rf, v.Configs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := "PARTITION\tLEADER\tLEADER-EPOCH\tREPLICAS\tISR\tOFFLINE-REPLICAS\tSTART\tEND\tHIGH-WATERMARK\t"
	if v.OnDisk {
		header += "SIZE\tSEGMENTS\t"
	}
	fmt.Fprintln(tw, header)
	for _, p := range v.Partitions {
		leader, epoch := "none", "-"
		if p.Leader >= 0 {
			leader = strconv.Itoa(int(p.Leader))
		}
		if p.LeaderEpoch >= 0 {
			epoch = strconv.Itoa(int(p.LeaderEpoch))
		}
		start, end, hw, size, segments := "-", "-", "-", "-", "-"
		if p.HasOffsets {
			start, end, hw = strconv.FormatInt(p.StartOffset, 10), strconv.FormatInt(p.EndOffset, 10), strconv.FormatInt(p.HighWatermark, 10)
			size, segments = strconv.FormatInt(p.Size, 10), strconv.Itoa(p.Segments)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t", p.Partition, leader, epoch,
			nodeList(p.Replicas), nodeList(p.ISR), nodeList(p.OfflineReplicas), start, end, hw)
		if v.OnDisk {
			fmt.Fprintf(tw, "%s\t%s\t", size, segments)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	for _, p := range v.Partitions {
		switch {
		case p.Problem != "":
			fmt.Fprintf(w, "Partition %d is OFFLINE: %s\n", p.Partition, p.Problem)
		case p.OffsetsProblem != "":
			fmt.Fprintf(w, "Partition %d: offsets unknown: %s\n", p.Partition, p.OffsetsProblem)
		}
	}
}

// nodeList spells a list of broker ids as kafka-topics does, "1,2,3"; an
// empty list is "-", so that every column of the table has a word.
func nodeList(ids []int32) string {
	if len(ids) == 0 {
		return "-"
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(int(id))
	}
	return strings.Join(s, ",")
}

// describedSettings are the topic settings "spool topics describe" shows,
// under Kafka's names, in this order.
var describedSettings = []string{
	"cleanup.policy", "compression.type", "max.message.bytes", "min.insync.replicas",
	"retention.bytes", "retention.ms", "segment.bytes", "segment.ms",
}

// topicConfigs spells a topic's settings with Kafka's names, as
// describedSettings lists them.
func topicConfigs(c spool.TopicConfig) string {
	ms := func(d time.Duration) int64 {
		if d == log.Unlimited {
			return -1
		}
		return d.Milliseconds()
	}
	return strings.Join([]string{
		fmt.Sprintf("cleanup.policy=%s", c.CleanupPolicy),
		fmt.Sprintf("compression.type=%s", c.Compression),
		fmt.Sprintf("max.message.bytes=%d", c.MaxMessageBytes),
		fmt.Sprintf("min.insync.replicas=%d", max(c.MinInSyncReplicas, 1)),
		fmt.Sprintf("retention.bytes=%d", c.RetentionBytes),
		fmt.Sprintf("retention.ms=%d", ms(c.RetentionTime)),
		fmt.Sprintf("segment.bytes=%d", c.SegmentBytes),
		fmt.Sprintf("segment.ms=%d", ms(c.SegmentAge)),
	}, ",")
}

func runTopicsDelete(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, tf := newTopicsFlagSet("delete", "--topic T [flags]", "Deletes a topic and all its data.", stderr)
	name := fs.String("topic", "", "the topic to delete")
	if code, ok := parseArgs(fs, args); !ok {
		return code
	}
	if *name == "" {
		return usageError(fs, "--topic is required")
	}
	remote, code, ok := tf.mode()
	if !ok {
		return code
	}
	if remote {
		a, ctx, cancel, ok := tf.dial(ctx, "spool topics delete", stderr)
		if !ok {
			return exitProblem
		}
		defer cancel()
		defer a.Close()
		if err := a.deleteTopic(ctx, *name); err != nil {
			fmt.Fprintf(stderr, "spool topics delete: %v\n", err)
			return exitProblem
		}
		fmt.Fprintf(stdout, "Deleted topic %s.\n", *name)
		return exitOK
	}
	b, ok := tf.open("spool topics delete", useExisting, stderr)
	if !ok {
		return exitProblem
	}
	code = exitOK
	if err := b.DeleteTopic(ctx, *name); err != nil {
		fmt.Fprintf(stderr, "spool topics delete: %v\n", err)
		code = exitProblem
	} else {
		fmt.Fprintf(stdout, "Deleted topic %s.\n", *name)
	}
	return closeBroker("spool topics delete", b, code, stderr)
}

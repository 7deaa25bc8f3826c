package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/log"
)

// topicsCommands are the subcommands of "spool topics".
var topicsCommands = []subcommand{
	{"create", "create a topic", runTopicsCreate},
	{"list", "list the topics' names", runTopicsList},
	{"describe", "describe a topic or every topic: settings and partitions", runTopicsDescribe},
	{"delete", "delete a topic and its data", runTopicsDelete},
}

// runTopics implements "spool topics": it dispatches to create, list,
// describe or delete.
func runTopics(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	return runSubcommand(ctx, "topics", "[flags]", "Manages the topics of a data directory, like kafka-topics.", topicsCommands, args, stdout, stderr)
}

// newTopicsFlagSet returns the flag set of "spool topics NAME", with the
// broker flags defined.
func newTopicsFlagSet(name, args, doc string, stderr io.Writer) (*flag.FlagSet, *brokerFlags) {
	return newSubcommandFlagSet("topics", name, args, doc, stderr)
}

func runTopicsCreate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, bf := newTopicsFlagSet("create", "--topic T [flags]",
		"Creates a topic. Settings left out take the broker's defaults (see \"spool topics describe\").", stderr)
	name := fs.String("topic", "", "the topic's `name`: 1 to 249 characters of [a-zA-Z0-9._-]")
	partitions := fs.Int("partitions", 1, "the number of partitions")
	retentionMs := fs.Int64("retention-ms", 0, "delete segments whose newest record is older than this many `ms` (retention.ms); -1 keeps them, 0 takes the default (7 days)")
	retentionBytes := fs.Int64("retention-bytes", 0, "delete a partition's oldest segments while it is larger than this many `bytes` (retention.bytes); -1 or 0: unlimited")
	segmentBytes := fs.Int64("segment-bytes", 0, "roll a partition's segment at this many `bytes` (segment.bytes); 0 takes the default (1 GiB)")
	maxMessageBytes := fs.Int("max-message-bytes", 0, "the largest batch a partition takes, in `bytes` after compression (max.message.bytes); 0 takes the default (1 MiB)")
	var cfg spool.TopicConfig
	codecFlag(fs, &cfg.Compression, "the `codec` of the batches produced to the topic (compression.type): none, gzip, snappy, lz4 or zstd (default none)")
	if code, ok := parseArgs(fs, args); !ok {
		return code
	}
	switch {
	case *name == "":
		return usageError(fs, "--topic is required")
	case *partitions < 1 || *partitions > math.MaxInt32:
		return usageError(fs, "--partitions must be at least 1, not %d", *partitions)
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
	cfg.Partitions = int32(*partitions)
	cfg.RetentionTime = time.Duration(*retentionMs) * time.Millisecond
	if *retentionMs == -1 {
		cfg.RetentionTime = log.Unlimited
	}
	cfg.RetentionBytes = *retentionBytes
	cfg.SegmentBytes = *segmentBytes
	cfg.MaxMessageBytes = *maxMessageBytes

	b, ok := bf.open("spool topics create", stderr)
	if !ok {
		return exitProblem
	}
	code := exitOK
	if err := b.CreateTopic(ctx, *name, cfg); err != nil {
		fmt.Fprintf(stderr, "spool topics create: %v\n", err)
		code = exitProblem
	} else {
		fmt.Fprintf(stdout, "Created topic %s.\n", *name)
	}
	return closeBroker("spool topics create", b, code, stderr)
}

func runTopicsList(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs, bf := newTopicsFlagSet("list", "[flags]", "Prints the topics' names, one a line, sorted.", stderr)
	if code, ok := parseArgs(fs, args); !ok {
		return code
	}
	b, ok := bf.open("spool topics list", stderr)
	if !ok {
		return exitProblem
	}
	for _, name := range b.Topics() {
		fmt.Fprintln(stdout, name)
	}
	return closeBroker("spool topics list", b, exitOK, stderr)
}

func runTopicsDescribe(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs, bf := newTopicsFlagSet("describe", "[--topic T] [flags]",
		"Describes a topic, or every topic: its ID, partition count and effective settings, then a\n"+
			"table of its partitions: start offset (the first readable), end offset (the next to be\n"+
			"written), high watermark (consumers read below it), leader epoch, bytes on disk and\n"+
			"segment count. A partition that could not be opened is OFFLINE, with the reason.", stderr)
	name := fs.String("topic", "", "the topic to describe (default: every topic)")
	if code, ok := parseArgs(fs, args); !ok {
		return code
	}
	b, ok := bf.open("spool topics describe", stderr)
	if !ok {
		return exitProblem
	}
	names := b.Topics()
	if *name != "" {
		names = []string{*name}
	}
	code := exitOK
	for i, n := range names {
		d, err := b.DescribeTopic(n)
		if err != nil {
			fmt.Fprintf(stderr, "spool topics describe: %v\n", err)
			code = exitProblem
			continue
		}
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		printTopic(stdout, d)
	}
	return closeBroker("spool topics describe", b, code, stderr)
}

// printTopic prints a topic's description: a line of the topic, as
// kafka-topics --describe has it, then a table of its partitions, then why
// each offline partition (all dashes in the table) could not be opened.
func printTopic(w io.Writer, d spool.TopicDescription) {
	fmt.Fprintf(w, "Topic: %s\tTopicId: %s\tPartitionCount: %d\tConfigs: %s\n", d.Name, d.ID, len(d.Partitions), topicConfigs(d.Config))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "PARTITION\tSTART\tEND\tHIGH-WATERMARK\tLEADER-EPOCH\tSIZE\tSEGMENTS\t\n")
	for _, p := range d.Partitions {
		if p.Offline != nil {
			fmt.Fprintf(tw, "%d\t-\t-\t-\t-\t-\t-\t\n", p.Partition)
			continue
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", p.Partition, p.StartOffset, p.EndOffset, p.HighWatermark, p.LeaderEpoch, p.Size, p.Segments)
	}
	tw.Flush()
	for _, p := range d.Partitions {
		if p.Offline != nil {
			fmt.Fprintf(w, "Partition %d is OFFLINE: %v\n", p.Partition, p.Offline)
		}
	}
}

// topicConfigs spells a topic's settings with Kafka's names.
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
		fmt.Sprintf("retention.bytes=%d", c.RetentionBytes),
		fmt.Sprintf("retention.ms=%d", ms(c.RetentionTime)),
		fmt.Sprintf("segment.bytes=%d", c.SegmentBytes),
		fmt.Sprintf("segment.ms=%d", ms(c.SegmentAge)),
	}, ",")
}

func runTopicsDelete(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, bf := newTopicsFlagSet("delete", "--topic T [flags]", "Deletes a topic and all its data.", stderr)
	name := fs.String("topic", "", "the topic to delete")
	if code, ok := parseArgs(fs, args); !ok {
		return code
	}
	if *name == "" {
		return usageError(fs, "--topic is required")
	}
	b, ok := bf.open("spool topics delete", stderr)
	if !ok {
		return exitProblem
	}
	code := exitOK
	if err := b.DeleteTopic(ctx, *name); err != nil {
		fmt.Fprintf(stderr, "spool topics delete: %v\n", err)
		code = exitProblem
	} else {
		fmt.Fprintf(stdout, "Deleted topic %s.\n", *name)
	}
	return closeBroker("spool topics delete", b, code, stderr)
}

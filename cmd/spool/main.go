// Command spool is the command-line tool for spool: it runs an embedded
// broker on a data directory to manage topics and to produce, consume and
// benchmark records, and it inspects segment files. Its subcommands are
// modelled on Kafka's tools:
//
//	spool topics create|list|describe|delete [--data DIR | --bootstrap-server H:P[,H:P...]] [--topic T] ...
//	    Manage topics, like kafka-topics: create one with its partition
//	    count and settings (--partitions, --retention-ms,
//	    --retention-bytes, --segment-bytes, --max-message-bytes,
//	    --compression), list them, describe them (ID, replication factor,
//	    settings, and per partition the leader, leader epoch, replicas,
//	    ISR, offline replicas, start and end offsets and high watermark,
//	    and on a data directory size and segment count), or delete one.
//	    With --bootstrap-server they work on a running broker or cluster
//	    over the Kafka protocol instead of a data directory, and create
//	    takes --replication-factor and any Kafka topic setting as
//	    --config name=value.
//
//	spool groups list|describe|delete|reset-offsets [--data DIR] [--group G] ...
//	    Manage consumer groups, like kafka-consumer-groups: list them with
//	    their state, describe one (members, their hosts and assignments,
//	    and per partition the committed offset, log end offset, high
//	    watermark and lag), delete one without members, or reset its
//	    committed offsets for a topic (--to-earliest, --to-latest,
//	    --to-offset, --to-datetime or --shift-by; a dry run that prints
//	    the plan unless --execute, which needs the group to be Empty).
//	    Membership lives in the broker's memory, so a data directory
//	    opened by the tool shows only groups with committed offsets, Empty.
//
//	spool cluster describe|log-dirs|producers --bootstrap-server H:P[,H:P...] ...
//	    Describe a running cluster over the Kafka protocol, like
//	    kafka-metadata-quorum, kafka-log-dirs and kafka-transactions
//	    describe-producers: describe prints the cluster id, the active
//	    controller, the controller quorum (leader, epoch, high watermark,
//	    and each voter's and observer's log end, lag and last fetch and
//	    caught-up times), the brokers (address, rack, fenced or alive) and
//	    the partitions that are under-replicated, under min ISR or
//	    offline; log-dirs each broker's data directory with its disk space
//	    and each replica's size and offset lag (--topic, --broker);
//	    producers the active idempotent producers of a topic's partitions
//	    (--topic, --partition).
//
//	spool partitions reassign|reassignments|cancel --bootstrap-server H:P ...
//	    Move partitions between the brokers of a running cluster, like
//	    kafka-reassign-partitions: reassign one (--topic, --partition,
//	    --replicas 1,2,4) or a JSON plan's (--reassignment-json-file), and
//	    with --wait until done; list the reassignments under way (replicas,
//	    adding, removing); cancel one. The new replicas catch up before the
//	    replaced ones leave.
//
//	spool leaders elect --bootstrap-server H:P --type preferred|unclean [--topic T [--partition P]]
//	    Elect leaders, like kafka-leader-election.
//
//	spool brokers unregister --bootstrap-server H:P --id N
//	    Remove a decommissioned broker's registration, like kafka-cluster
//	    unregister: refused while it holds replicas or runs.
//
//	spool produce --topic T [--key-separator SEP] [--print-acks] [--partition P] ...
//	    Read records from stdin, one per line, and produce them, like
//	    kafka-console-producer. With --print-acks, print "PARTITION OFFSET"
//	    for each record once it is written: under the default --flush sync,
//	    once it is on stable storage.
//
//	spool consume --topic T [--from earliest|latest|OFFSET|TIME] [--count N] ...
//	    Print records, one value per line, like kafka-console-consumer,
//	    until --count records, --timeout without new ones, or SIGINT.
//
//	spool perf produce|consume --topic T ...
//	    Measure throughput and latency, like kafka-producer-perf-test and
//	    kafka-consumer-perf-test: a progress line every --reporting-interval,
//	    then a summary (records/s, MB/s, and for produce the average and
//	    p50/p95/p99/p99.9/max latency).
//
//	spool serve [--listen HOST:PORT] [--advertised-addr HOST:PORT] [--sasl-plain user:pass,...] ...
//	    Serve the broker over the Kafka protocol until SIGINT or SIGTERM,
//	    like kafka-server-start: Kafka clients and tools (kcat, franz-go,
//	    sarama, kafka-go, kafkajs, the Java client) produce, consume, run
//	    consumer groups and administer topics. --sasl-plain,
//	    --sasl-scram-sha-256 and --sasl-scram-sha-512 require clients to
//	    authenticate; --log-level sets what it logs on stderr. Once
//	    listening it prints "spool: serving on HOST:PORT" on stderr.
//
//	spool dump [--records] [--verify-index] FILE...
//	    Print the contents of segment files, like Kafka's DumpLogSegments:
//	    the batches of a .log (and with --records each record), the
//	    entries of a .index or .timeindex checked against their .log, or
//	    a log's checkpoint file.
//
//	spool check [--quiet] PATH
//	    Verify a data directory, or one partition directory, without
//	    modifying anything: what spool serve verifies when it opens it
//	    (the topic registry, each partition's partition.metadata, the
//	    logs' checkpoints, leader-epoch and replication-offset
//	    checkpoints, producer snapshots, meta.properties, producer-ids),
//	    and that every batch frames, has magic 2 and a valid CRC-32C, its
//	    records decode, offsets increase within and across segments, and
//	    the indexes agree with the logs. Exit status 1 where serve would
//	    refuse the directory or data is corrupt, 0 when clean (warnings,
//	    such as a torn tail a crash left, do not count), 2 on usage errors.
//
//	spool repair [--dry-run] DIR
//	    Rebuild a data directory's missing or damaged topic registry
//	    (topics.json) from its partition directories and their
//	    partition.metadata, printing every decision; refuse, writing
//	    nothing, where that would mean guessing (partitions disagreeing on
//	    a topic id, a gap in partition numbers). Topics' own settings are
//	    lost: the rebuilt topics keep every record. It takes the data
//	    directory's lock and never writes in a partition directory.
//
// The broker commands (topics, groups, produce, consume, perf, serve) open
// the data directory named by --data (default ./spool-data) with
// spool.Open, which locks it: while one of them runs, another fails with a
// message saying the directory is in use. A cluster node's data directory
// (it holds the metadata log, __cluster_metadata-0) is refused: only the
// node opens it; reach the cluster with topics --bootstrap-server. Those that append
// records (produce, perf produce, serve, and groups delete and
// reset-offsets --execute, which commit offsets) take --flush (sync, none
// or interval:D; default sync), the broker's flush policy; the others
// append nothing and do not offer it. They exit 1
// when the broker reports an error (an invalid topic name, a topic that
// exists or does not, a group that does not exist or has members, a record
// that failed) and 2 on usage errors.
//
// dump and check read files with plain read-only opens and never take the
// lock, so they can inspect the directory of a running broker (seeing
// whatever it has written so far) or the remains of a crashed one. repair
// takes the lock: it fails, exit 1, while a broker has the directory open.
//
// On SIGINT or SIGTERM the broker commands stop cleanly: produce flushes
// what it has read, consume and perf print what they have, serve lets the
// requests in flight finish, and all close the broker. A second signal
// kills the process.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// command is one subcommand. run gets a context that ends when the process
// is asked to stop, the arguments after the command name and the standard
// streams, and returns the process exit status.
type command struct {
	name    string
	args    string
	summary string
	run     func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int
}

// commands lists the subcommands in the order usage shows them.
var commands = []command{
	{"topics", "create|list|describe|delete [flags]", "create, list, describe and delete topics", runTopics},
	{"groups", "list|describe|delete|reset-offsets [flags]", "list, describe and delete consumer groups; reset their offsets", runGroups},
	{"cluster", "describe|log-dirs|producers --bootstrap-server H:P [flags]", "describe a running cluster: quorum, brokers, partitions' health, log dirs, producers", runCluster},
	{"partitions", "reassign|reassignments|cancel --bootstrap-server H:P [flags]", "move partitions between a cluster's brokers", runPartitions},
	{"leaders", "elect --bootstrap-server H:P --type preferred|unclean [flags]", "elect partition leaders in a cluster", runLeaders},
	{"brokers", "unregister --bootstrap-server H:P --id N", "remove a decommissioned broker from a cluster", runBrokers},
	{"acls", "create|list|delete --bootstrap-server H:P [flags]", "manage the ACLs of a broker serving with --authorizer", runACLs},
	{"quotas", "alter|describe --bootstrap-server H:P [flags]", "set and show client quotas (byte rates, request share)", runQuotas},
	{"produce", "--topic T [flags]", "produce stdin's lines as records", runProduce},
	{"consume", "--topic T [flags]", "print a topic's records", runConsume},
	{"perf", "produce|consume --topic T [flags]", "measure producer or consumer throughput and latency", runPerf},
	{"dump", "[--records] [--verify-index] FILE...", "print the batches, records and index entries of segment files", runDump},
	{"check", "[--quiet] PATH", "verify a data directory or partition directory; exit 1 where spool serve would refuse it", runCheck},
	{"repair", "[--dry-run] DIR", "rebuild a data directory's damaged or missing topic registry from its partitions", runRepair},
	{"serve", "[--listen HOST:PORT] [flags]", "serve the broker to Kafka clients over the Kafka protocol", runServe},
	{"version", "", "print the version, VCS revision, Go version and Kafka protocol", runVersion},
}

// Exit statuses shared by the subcommands.
const (
	exitOK      = 0
	exitProblem = 1 // an error from the broker (topics, groups, produce, consume, perf), corruption found (check), a file not dumped cleanly (dump)
	exitUsage   = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal, let a second one kill the process.
		<-ctx.Done()
		stop()
	}()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run dispatches to the subcommand named by args[0] and returns the exit
// status. With no arguments it prints usage to stderr and fails, as the go
// command does; "help" prints it to stdout and succeeds, and "help CMD"
// prints the subcommand's flags.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	stderr = errorPrefixWriter{stderr}
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			if c, ok := lookup(args[1]); ok {
				return c.run(ctx, append(args[2:len(args):len(args)], "--help"), stdin, stdout, stdout)
			}
			fmt.Fprintf(stderr, "spool help %s: unknown command\n", args[1])
			usage(stderr)
			return exitUsage
		}
		usage(stdout)
		return exitOK
	case "--version", "-version":
		return runVersion(ctx, args[1:], stdin, stdout, stderr)
	}
	c, ok := lookup(name)
	if !ok {
		fmt.Fprintf(stderr, "spool: unknown command %q\n\n", name)
		usage(stderr)
		return exitUsage
	}
	return c.run(ctx, args[1:], stdin, stdout, stderr)
}

// errorPrefixWriter is the command's stderr. The commands print errors as
// "spool CMD: " and the error, and the root package's errors start with
// "spool: " too, which would read "spool consume: spool: unknown topic".
// Rather than unwrap each error where it is printed, the stream drops the
// inner "spool: " from every line that starts with the command's prefix.
// Each message is one Write (fmt.Fprintf), so a line is never split.
type errorPrefixWriter struct{ w io.Writer }

func (e errorPrefixWriter) Write(p []byte) (int, error) {
	if !bytes.HasPrefix(p, []byte("spool ")) || !bytes.Contains(p, []byte(": spool: ")) {
		return e.w.Write(p)
	}
	if _, err := e.w.Write(bytes.ReplaceAll(p, []byte(": spool: "), []byte(": "))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// lookup finds a subcommand by name.
func lookup(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// usage prints the list of commands.
func usage(w io.Writer) {
	fmt.Fprintf(w, "spool is a tool for spool brokers and data directories (Kafka's log format).\n\n")
	fmt.Fprintf(w, "Usage:\n\n\tspool <command> [arguments]\n\nThe commands are:\n\n")
	for _, c := range commands {
		fmt.Fprintf(w, "\t%-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nUse \"spool help <command>\" for a command's flags")
	fmt.Fprintf(w, " (\"spool help topics create\", \"spool help groups describe\", \"spool help perf produce\" for theirs).\n")
}

// printFlags lists a subcommand's flags as they are meant to be spelt,
// --kebab-case (the flag package accepts one dash or two; its own listing
// shows one), with their defaults unless zero or in the usage text.
func printFlags(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		arg, text := flag.UnquoteUsage(f)
		if arg != "" {
			arg = " " + arg
		}
		switch f.DefValue {
		case "", "0", "0s", "false":
		default:
			if !strings.Contains(text, "(default") {
				text += fmt.Sprintf(" (default %s)", f.DefValue)
			}
		}
		fmt.Fprintf(fs.Output(), "  --%s%s\n    \t%s\n", f.Name, arg, text)
	})
}

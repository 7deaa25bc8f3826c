package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// clusterCommands are the subcommands of "spool cluster".
var clusterCommands = []subcommand{
	{"describe", "describe the cluster: id, controller, quorum, brokers, and partitions that are under-replicated, under min ISR or offline", runClusterDescribe},
	{"log-dirs", "describe each broker's data directory: disk space, and each replica's size and offset lag", runClusterLogDirs},
	{"producers", "list the active idempotent producers of a topic's partitions", runClusterProducers},
}

// runCluster implements "spool cluster": it dispatches to describe,
// log-dirs or producers.
func runCluster(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	return runSubcommand(ctx, "cluster", "--bootstrap-server HOST:PORT[,HOST:PORT...] [flags]",
		"Describes a running cluster (spool serve, or any Kafka cluster) over the Kafka protocol,\n"+
			"as kafka-metadata-quorum, kafka-log-dirs and kafka-transactions describe-producers do.",
		clusterCommands, args, stdout, stderr)
}

// clusterFlags are the flags every "spool cluster" command has.
type clusterFlags struct {
	fs        *flag.FlagSet
	bootstrap string
	timeout   time.Duration
	servers   []string // parsed from bootstrap by check
	sec       *clientSecurity
}

// newClusterFlagSet returns the flag set of "spool cluster NAME", with
// --bootstrap-server and --timeout defined.
func newClusterFlagSet(name, args, doc string, stderr io.Writer) (*flag.FlagSet, *clusterFlags) {
	fs := flag.NewFlagSet("cluster "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cf := &clusterFlags{fs: fs}
	fs.StringVar(&cf.bootstrap, "bootstrap-server", "", "the cluster to describe: `host:port[,host:port...]`, one or more of its brokers (required)")
	cf.sec = addClientSecurityFlags(fs)
	fs.DurationVar(&cf.timeout, "timeout", defaultAdminTimeout, "how long to wait for the brokers to answer")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: spool cluster %s %s\n\n%s\n\nFlags:\n", name, args, doc)
		printFlags(fs)
	}
	return fs, cf
}

// check validates the flags once parsed; false, with the exit status,
// after a usage error.
func (cf *clusterFlags) check() (int, bool) {
	if cf.bootstrap == "" {
		return usageError(cf.fs, "--bootstrap-server is required"), false
	}
	if cf.timeout <= 0 {
		return usageError(cf.fs, "--timeout must be positive, not %v", cf.timeout), false
	}
	for _, s := range strings.Split(cf.bootstrap, ",") {
		if _, port, err := splitHostPort(s); err != nil || port == 0 {
			return usageError(cf.fs, "--bootstrap-server %q: want HOST:PORT[,HOST:PORT...] with non-zero ports", cf.bootstrap), false
		}
		cf.servers = append(cf.servers, s)
	}
	return exitOK, true
}

// dial returns an admin client of the --bootstrap-server brokers and a
// context bounded by --timeout, printing why not on stderr.
func (cf *clusterFlags) dial(ctx context.Context, name string, stderr io.Writer) (*adminClient, context.Context, context.CancelFunc, bool) {
	a, err := newAdminClient(cf.servers, cf.timeout, cf.sec)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return nil, nil, nil, false
	}
	ctx, cancel := context.WithTimeout(ctx, cf.timeout)
	return a, ctx, cancel, true
}

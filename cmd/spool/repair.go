package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/spoolmq/spool"
)

// runRepair implements "spool repair": it rebuilds a data directory's
// topic registry (topics.json) from the partition directories with
// spool.RebuildRegistry, printing every decision. It exits 0 when the
// registry was rebuilt (or was intact, or would be rebuilt, with
// --dry-run), 1 when it cannot be rebuilt without guessing or the
// directory is in use, and 2 on usage errors.
func runRepair(_ context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("repair", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dryRun := fs.Bool("dry-run", false, "print what would be done and write no registry")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: spool repair [--dry-run] DIR\n\n")
		fmt.Fprintf(fs.Output(), "Rebuilds the topic registry (DIR/topics.json) of a data directory when it is missing or\n")
		fmt.Fprintf(fs.Output(), "damaged - spool serve refuses such a directory, and spool check says so - from the\n")
		fmt.Fprintf(fs.Output(), "partition directories <topic>-<n> and their partition.metadata, and prints what it\n")
		fmt.Fprintf(fs.Output(), "decided. It never writes or removes anything in a partition directory; it keeps the\n")
		fmt.Fprintf(fs.Output(), "damaged registry as topics.json.damaged-TIME, and leaves an intact registry alone.\n\n")
		fmt.Fprintf(fs.Output(), "Rules: a topic's id is the one its partitions' partition.metadata agree on (a\n")
		fmt.Fprintf(fs.Output(), "partition without the file joins its topic; a topic with none gets a new id); its\n")
		fmt.Fprintf(fs.Output(), "partition count is its number of directories, which must be numbered 0 to count-1.\n")
		fmt.Fprintf(fs.Output(), "Partitions that disagree on the id, a gap in the numbers, an unreadable\n")
		fmt.Fprintf(fs.Output(), "partition.metadata or an invalid topic name are reported and nothing is written.\n")
		fmt.Fprintf(fs.Output(), "Topics' own settings were only in the registry: __consumer_offsets gets its usual\n")
		fmt.Fprintf(fs.Output(), "ones, every other topic keeps every record (retention.ms=-1, retention.bytes=-1)\n")
		fmt.Fprintf(fs.Output(), "and takes the broker's defaults otherwise; set their settings again afterwards.\n\n")
		fmt.Fprintf(fs.Output(), "Exit status: 0 when the registry was rebuilt (or is intact), 1 when it cannot be\n")
		fmt.Fprintf(fs.Output(), "rebuilt without guessing or DIR is in use by a broker, 2 on usage errors.\n\nFlags:\n")
		printFlags(fs)
	}
	positional, ok, code := parsePositional(fs, args)
	if !ok {
		return code
	}
	if len(positional) != 1 {
		fmt.Fprintf(stderr, "spool repair: want exactly one DIR, got %d arguments\n", len(positional))
		fs.Usage()
		return exitUsage
	}
	dir := positional[0]
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		if err == nil {
			err = fmt.Errorf("%s is not a directory", dir)
		}
		fmt.Fprintf(stderr, "spool repair: %v\n", err)
		return exitUsage
	}
	rep, err := spool.RebuildRegistry(dir, spool.RepairOptions{DryRun: *dryRun})
	switch {
	case errors.Is(err, spool.ErrLocked):
		fmt.Fprintf(stderr, "spool repair: data directory %s is in use by another process (%v); stop the broker first\n", dir, err)
		return exitProblem
	case rep == nil:
		fmt.Fprintf(stderr, "spool repair: %v\n", err)
		return exitProblem
	}
	if rep.Intact {
		fmt.Fprintf(stdout, "%s/topics.json is intact: nothing to repair\n", dir)
		return exitOK
	}
	for _, f := range rep.Findings {
		level := map[spool.FindingLevel]string{spool.FindingInfo: "info", spool.FindingWarning: "warning", spool.FindingRefusal: "error"}[f.Level]
		fmt.Fprintf(stdout, "%s: %s: %s\n", level, f.Path, f.Message)
	}
	for _, t := range rep.Topics {
		how := "the id its partitions record"
		if t.NewID {
			how = "a new id"
		}
		settings := "keeps every record, broker defaults otherwise"
		if t.Internal {
			settings = "the offsets topic's settings (compacted, kept forever)"
		}
		fmt.Fprintf(stdout, "topic %s: id %s (%s), %d partitions, %s\n", t.Name, t.ID, how, t.Partitions, settings)
	}
	if err != nil {
		fmt.Fprintf(stdout, "%v\n", err)
		return exitProblem
	}
	switch {
	case *dryRun:
		fmt.Fprintf(stdout, "dry run: would write %s/topics.json with %d topics\n", dir, len(rep.Topics))
	case rep.Written:
		if rep.DamagedCopy != "" {
			fmt.Fprintf(stdout, "kept the damaged registry as %s\n", rep.DamagedCopy)
		}
		fmt.Fprintf(stdout, "wrote %s/topics.json with %d topics\n", dir, len(rep.Topics))
	}
	return exitOK
}

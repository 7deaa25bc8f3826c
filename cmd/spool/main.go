// Command spool is the command-line tool for spool data directories. Its
// subcommands are modelled on Kafka's tools:
//
//	spool dump [--records] [--verify-index] FILE...
//	    Print the contents of segment files, like Kafka's DumpLogSegments:
//	    the batches of a .log (and with --records each record), the
//	    entries of a .index or .timeindex checked against their .log, or
//	    a log's checkpoint file.
//
//	spool check [--quiet] PATH
//	    Verify a partition directory, or a data directory of partition
//	    directories, without modifying anything: every batch frames, has
//	    magic 2 and a valid CRC-32C, its records decode, offsets increase
//	    within and across segments, and the indexes agree with the logs.
//	    Exit status 1 when corruption is found, 0 when clean (warnings,
//	    such as a torn tail a crash left, do not count), 2 on usage errors.
//
// Both read files with plain read-only opens and never take the log's
// lock, so they can inspect the directory of a running broker (seeing
// whatever it has written so far) or the remains of a crashed one.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
)

// command is one subcommand. run gets the arguments after the command
// name and returns the process exit status.
type command struct {
	name    string
	args    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

// commands lists the subcommands in the order usage shows them.
var commands = []command{
	{"dump", "[--records] [--verify-index] FILE...", "print the batches, records and index entries of segment files", runDump},
	{"check", "[--quiet] PATH", "verify a data directory or partition directory; exit 1 on corruption", runCheck},
}

// Exit statuses shared by the subcommands.
const (
	exitOK      = 0
	exitProblem = 1 // corruption found (check), or a file could not be dumped cleanly (dump)
	exitUsage   = 2
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches to the subcommand named by args[0] and returns the exit
// status. With no arguments it prints usage to stderr and fails, as the go
// command does; "help" prints it to stdout and succeeds, and "help CMD"
// prints the subcommand's flags.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			if c, ok := lookup(args[1]); ok {
				return c.run([]string{"--help"}, stdout, stdout)
			}
			fmt.Fprintf(stderr, "spool help %s: unknown command\n", args[1])
			usage(stderr)
			return exitUsage
		}
		usage(stdout)
		return exitOK
	}
	c, ok := lookup(name)
	if !ok {
		fmt.Fprintf(stderr, "spool: unknown command %q\n\n", name)
		usage(stderr)
		return exitUsage
	}
	return c.run(args[1:], stdout, stderr)
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
	fmt.Fprintf(w, "spool is a tool for spool data directories (Kafka's log format).\n\n")
	fmt.Fprintf(w, "Usage:\n\n\tspool <command> [arguments]\n\nThe commands are:\n\n")
	for _, c := range commands {
		fmt.Fprintf(w, "\t%-6s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nUse \"spool help <command>\" for a command's flags.\n")
}

// printFlags lists a subcommand's flags as they are meant to be spelt,
// --kebab-case (the flag package accepts one dash or two; its own listing
// shows one).
func printFlags(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		arg, text := flag.UnquoteUsage(f)
		if arg != "" {
			arg = " " + arg
		}
		fmt.Fprintf(fs.Output(), "  --%s%s\n    \t%s\n", f.Name, arg, text)
	})
}

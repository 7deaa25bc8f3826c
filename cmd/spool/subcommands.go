package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
)

// subcommand is one command of a command group, like "spool topics create".
type subcommand struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

// runSubcommand implements a command group, "spool GROUP NAME [flags]": it
// runs the subcommand named by args[0]. "help" prints the group's usage to
// stdout; no command or an unknown one prints it to stderr and fails with
// exitUsage. synopsis follows the command names in the usage line; about,
// if not empty, is a paragraph under it.
func runSubcommand(ctx context.Context, group, synopsis, about string, cmds []subcommand, args []string, stdout, stderr io.Writer) int {
	usage := func(w io.Writer) {
		names := make([]string, len(cmds))
		width := 0
		for i, c := range cmds {
			names[i] = c.name
			width = max(width, len(c.name))
		}
		fmt.Fprintf(w, "Usage: spool %s <%s> %s\n\n", group, strings.Join(names, "|"), synopsis)
		if about != "" {
			fmt.Fprintf(w, "%s\n\n", about)
		}
		for _, c := range cmds {
			fmt.Fprintf(w, "\t%-*s %s\n", width+1, c.name, c.summary)
		}
		fmt.Fprintf(w, "\nUse \"spool help %s <command>\" for a command's flags.\n", group)
	}
	if len(args) == 0 {
		fmt.Fprintf(stderr, "spool %s: no command given\n\n", group)
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return exitOK
	}
	for _, c := range cmds {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "spool %s: unknown command %q\n\n", group, args[0])
	usage(stderr)
	return exitUsage
}

// newSubcommandFlagSet returns the flag set of "spool GROUP NAME", with the
// broker flags defined: --data, and --flush if flush (withFlush).
func newSubcommandFlagSet(group, name, args, doc string, flush bool, stderr io.Writer) (*flag.FlagSet, *brokerFlags) {
	fs := flag.NewFlagSet(group+" "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	bf := addBrokerFlags(fs, flush)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: spool %s %s %s\n\n%s\n\nFlags:\n", group, name, args, doc)
		printFlags(fs)
	}
	return fs, bf
}

package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// kafkaProtocol says which Kafka the server speaks as. It follows the
// newest API versions transport registers: consumer groups of KIP-848 at
// ConsumerGroupHeartbeat v1 (Kafka 4.0) and share groups of KIP-932 at
// ShareGroupDescribe and ShareAcknowledge v1 (Kafka 4.1).
const kafkaProtocol = "as Kafka 4.1 (KIP-848 consumer groups, KIP-932 share groups)"

// runVersion implements "spool version" (and "spool --version"): the
// module version and VCS revision the binary was built from, the Go
// version, and the Kafka protocol it speaks.
func runVersion(_ context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "-h", "-help", "--help":
			fmt.Fprintf(stdout, "Usage: spool version\n\nPrints the spool version, its VCS revision, the Go version and the Kafka protocol it speaks.\n")
			return exitOK
		}
		fmt.Fprintf(stderr, "spool version: unexpected argument %q\n", args[0])
		return exitUsage
	}
	printVersion(stdout)
	return exitOK
}

// printVersion writes the version lines.
func printVersion(w io.Writer) {
	version, revision := "(unknown)", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		version = bi.Main.Version
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if modified && revision != "" {
			revision += " (modified)"
		}
	}
	if version == "(devel)" || version == "" {
		// Built from a checkout (go build) rather than installed at a
		// version (go install module@version): the revision says more.
		version = "(devel)"
	}
	fmt.Fprintf(w, "spool %s\n", version)
	if revision != "" {
		fmt.Fprintf(w, "revision: %s\n", revision)
	}
	fmt.Fprintf(w, "go: %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(w, "Kafka protocol: %s\n", kafkaProtocol)
}

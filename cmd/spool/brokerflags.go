package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/controller"
	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/record"
)

// defaultDataDir is where the broker commands keep their data unless
// --data says otherwise.
const defaultDataDir = "./spool-data"

// brokerFlags are the flags of every command that opens a broker.
type brokerFlags struct {
	data  string
	flush log.FlushPolicy
	// remote names the flag that reaches a running server instead, for
	// the message when a server holds the directory: empty if the
	// command has none.
	remote string
}

// Whether a command that opens a broker takes --flush, the flush policy of
// the records it appends: only commands that append records take it.
const (
	withoutFlush = false // the command only reads, or writes no records
	withFlush    = true  // the command appends records (or commits offsets)
)

// addBrokerFlags defines --data on fs, and --flush if flush (withFlush).
//
// --flush is the policy of appends: a command that appends nothing has no
// use for it, and must not offer it. (Its only effect there would be to
// loosen what opening a log tolerates - under none, damage inside a log is
// truncated rather than refused - which a command that only reads must
// never do on a user's say-so.)
func addBrokerFlags(fs *flag.FlagSet, flush bool) *brokerFlags {
	bf := &brokerFlags{}
	fs.StringVar(&bf.data, "data", defaultDataDir, "the broker's data `dir`ectory")
	if !flush {
		return bf
	}
	fs.Func("flush", "flush `policy`: sync (an acknowledged record is on stable storage), none (the OS writes back), or interval:D (fsync every D) (default sync)",
		func(s string) error {
			p, err := log.ParseFlushPolicy(s)
			if err != nil {
				return err
			}
			bf.flush = p
			return nil
		})
	return bf
}

// errClusterNodeDir: a cluster node's data directory, which only the node
// itself opens (its topics live in the cluster's metadata log).
var errClusterNodeDir = errors.New("belongs to a cluster node")

// checkNotClusterNode refuses the data directory of a cluster node (spool
// serve --controller-quorum-voters), which holds the metadata log and no
// topic registry: opened as a standalone broker it would look damaged, and
// a tool that "repaired" it would lose the cluster's metadata.
func checkNotClusterNode(dir string) error {
	if _, err := os.Stat(controller.MetadataDir(dir)); err == nil {
		return fmt.Errorf("%s %w (it holds the cluster's metadata log, %s): start the node with spool serve and its "+
			"--node-id and --controller-quorum-voters, and reach the cluster over the Kafka protocol "+
			"(spool topics --bootstrap-server, or any Kafka client)", dir, errClusterNodeDir, filepath.Base(controller.MetadataDir(dir)))
	}
	return nil
}

// open opens the broker, printing why it could not on stderr. name is the
// command, for messages ("spool produce"); use says whether the data
// directory must exist already.
func (bf *brokerFlags) open(name string, use dataDirUse, stderr io.Writer) (*spool.Broker, bool) {
	if err := checkNotClusterNode(bf.data); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return nil, false
	}
	var err error
	if use == useExisting {
		err = checkDataDir(bf.data)
	} else {
		err = prepareDataDir(name, bf.data, stderr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return nil, false
	}
	b, err := spool.Open(bf.data, spool.Options{Flush: bf.flush})
	if errors.Is(err, spool.ErrLocked) {
		fmt.Fprintf(stderr, "%s: %s\n", name, lockedMessage(bf.data, bf.remote, err))
		return nil, false
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return nil, false
	}
	return b, true
}

// lockedMessage says that another process holds dir, and how to get at
// its data anyway: through the server holding it with the command's
// remote flag, if it has one.
func lockedMessage(dir, remote string, err error) string {
	msg := fmt.Sprintf("data directory %s is in use by another process (%v)", dir, err)
	if remote != "" {
		msg += fmt.Sprintf("; if a spool serve holds it, reach that server with %s HOST:PORT", remote)
	}
	return msg
}

// closeBroker closes b and reports a failure on stderr. It returns code,
// or exitProblem if Close failed.
func closeBroker(name string, b *spool.Broker, code int, stderr io.Writer) int {
	if err := b.Close(); err != nil {
		fmt.Fprintf(stderr, "%s: close: %v\n", name, err)
		return exitProblem
	}
	return code
}

// setFlags returns the names of the flags given on fs's command line.
func setFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// requireFlag refuses, as a usage error, any of the flags names given on
// fs's command line without the flag need (have says whether need is in
// effect): they do something only beside it. ok is false, with the exit
// status in code, after a refusal.
func requireFlag(fs *flag.FlagSet, have bool, need string, names ...string) (code int, ok bool) {
	if have {
		return exitOK, true
	}
	set := setFlags(fs)
	for _, name := range names {
		if set[name] {
			return usageError(fs, "--%s needs --%s", name, need), false
		}
	}
	return exitOK, true
}

// usageError prints a usage problem found after parsing, then the usage,
// and returns exitUsage.
func usageError(fs *flag.FlagSet, format string, args ...any) int {
	fmt.Fprintf(fs.Output(), "spool %s: %s\n", fs.Name(), fmt.Sprintf(format, args...))
	fs.Usage()
	return exitUsage
}

// codecFlag defines a --compression flag; usage names the codec `codec`
// and says what the default is.
func codecFlag(fs *flag.FlagSet, c *record.Codec, usage string) {
	fs.Func("compression", usage, func(s string) error {
		codec, err := record.ParseCodec(s)
		if err != nil {
			return err
		}
		*c = codec
		return nil
	})
}

// acksFlag defines an --acks flag: all (or -1), 1 or 0, as Kafka spells
// them.
func acksFlag(fs *flag.FlagSet, a *spool.Acks) {
	fs.Func("acks", "the `level` of acknowledgement: all (or -1): a record counts as delivered once written, and with --flush sync on stable storage; 1: the same, on one broker; 0: as soon as it is batched, with offset -1 (default all)",
		func(s string) error {
			acks, err := spool.ParseAcks(s)
			if err != nil {
				return fmt.Errorf("%q: want all, -1, 1 or 0", s)
			}
			*a = acks
			return nil
		})
}

// lingerConfig maps a --linger flag to ProducerConfig.Linger, where 0
// means the default and a negative value no wait.
func lingerConfig(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spoolmq/spool"
)

// startPosition is where consume starts reading each partition (--from).
type startPosition struct {
	kind   string // "earliest", "latest", "offset" or "time"
	offset int64
	time   time.Time
}

// parseStartPosition parses --from: earliest, latest, an offset, or an
// RFC 3339 time.
func parseStartPosition(s string) (startPosition, error) {
	switch s {
	case "earliest", "latest":
		return startPosition{kind: s}, nil
	}
	if off, err := strconv.ParseInt(s, 10, 64); err == nil {
		if off < 0 {
			return startPosition{}, fmt.Errorf("offset %d is negative", off)
		}
		return startPosition{kind: "offset", offset: off}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return startPosition{kind: "time", time: t}, nil
	}
	return startPosition{}, fmt.Errorf("want earliest, latest, an offset or an RFC 3339 time (2006-01-02T15:04:05Z), not %q", s)
}

// runConsume implements "spool consume", the console consumer. It returns
// 0 when it stopped as asked (--count records printed, --timeout without a
// record and no --count, a signal), 1 on an error or when --timeout passed
// before --count records, 2 on usage errors.
func runConsume(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("consume", flag.ContinueOnError)
	fs.SetOutput(stderr)
	bf := addBrokerFlags(fs, withoutFlush) // it only reads
	topic := fs.String("topic", "", "the `topic` to read")
	from := startPosition{kind: "latest"}
	fs.Func("from", "the `position` to start from in each partition: earliest, latest (only new records), an offset (one outside a partition's log is moved to its start or end), or an RFC 3339 time (the first record at or after it) (default latest)",
		func(s string) (err error) {
			from, err = parseStartPosition(s)
			return err
		})
	part := fs.Int("partition", -1, "read only this `partition` (default: all)")
	count := fs.Int64("count", 0, "stop after printing `n` records (default: no limit)")
	printOffsets := fs.Bool("print-offsets", false, "prefix each value with \"PARTITION OFFSET \"")
	printKeys := fs.Bool("print-keys", false, "prefix each value with its key (null: no key) and a tab")
	timeout := fs.Duration("timeout", 0, "stop once this long passes without a new record (default: wait for ever)")
	bootstrap := fs.String("bootstrap-server", "", "instead of opening --data, read from a running broker or cluster (one that holds the data directory) at `host:port[,host:port...]`")
	sec := addClientSecurityFlags(fs)
	bf.remote = "--bootstrap-server"
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: spool consume --topic T [flags]\n\n")
		fmt.Fprintf(fs.Output(), "Prints a topic's records, one value a line (a tombstone as null), like\n")
		fmt.Fprintf(fs.Output(), "kafka-console-consumer, until --count records are printed, --timeout passes without\n")
		fmt.Fprintf(fs.Output(), "a new one, or SIGINT/SIGTERM. Exits 1 on an error, or if --timeout ends it before\n")
		fmt.Fprintf(fs.Output(), "--count records.\n\nFlags:\n")
		printFlags(fs)
	}
	if code, ok := parseArgs(fs, args); !ok {
		return code
	}
	switch {
	case *topic == "":
		return usageError(fs, "--topic is required")
	case *part < -1 || *part > 1<<31-1:
		return usageError(fs, "--partition must be a partition number, not %d", *part)
	case *count < 0:
		return usageError(fs, "--count must not be negative")
	case *timeout < 0:
		return usageError(fs, "--timeout must not be negative")
	}

	cc := &consoleConsumer{
		out: bufio.NewWriterSize(stdout, 64<<10), stderr: stderr,
		printOffsets: *printOffsets, printKeys: *printKeys, count: *count, timeout: *timeout,
	}
	if code, ok := requireFlag(fs, *bootstrap != "", "bootstrap-server", clientSecurityFlags...); !ok {
		return code
	}
	if *bootstrap != "" {
		if setFlags(fs)["data"] {
			return usageError(fs, "--data opens a data directory; with --bootstrap-server the brokers' own are used")
		}
		var servers []string
		for _, s := range strings.Split(*bootstrap, ",") {
			if _, port, err := splitHostPort(s); err != nil || port == 0 {
				return usageError(fs, "--bootstrap-server %q: want HOST:PORT[,HOST:PORT...] with non-zero ports", *bootstrap)
			}
			servers = append(servers, s)
		}
		code := cc.runRemote(ctx, servers, sec, *topic, int32(*part), from)
		fmt.Fprintf(stderr, "Processed a total of %d messages\n", cc.printed)
		return code
	}
	b, ok := bf.open("spool consume", useExisting, stderr)
	if !ok {
		return exitProblem
	}
	code := cc.run(ctx, b, *topic, int32(*part), from)
	fmt.Fprintf(stderr, "Processed a total of %d messages\n", cc.printed)
	return closeBroker("spool consume", b, code, stderr)
}

// consoleConsumer prints records.
type consoleConsumer struct {
	out          *bufio.Writer
	stderr       io.Writer
	printOffsets bool
	printKeys    bool
	count        int64 // 0: no limit
	timeout      time.Duration
	printed      int64
}

// run assigns and positions the partitions, then prints records until
// done, and returns the exit status.
func (cc *consoleConsumer) run(ctx context.Context, b *spool.Broker, topic string, part int32, from startPosition) int {
	d, err := b.DescribeTopic(topic)
	if err != nil {
		fmt.Fprintf(cc.stderr, "spool consume: %v\n", err)
		return exitProblem
	}
	parts := d.Partitions
	if part >= 0 {
		if int(part) >= len(parts) {
			fmt.Fprintf(cc.stderr, "spool consume: %v: %s-%d (the topic has %d)\n", spool.ErrUnknownPartition, topic, part, len(parts))
			return exitProblem
		}
		parts = parts[part : part+1]
	}
	cfg := spool.ConsumerConfig{AutoOffsetReset: spool.ResetLatest}
	if from.kind == "earliest" {
		cfg.AutoOffsetReset = spool.ResetEarliest
	}
	c, err := b.NewConsumer(cfg)
	if err != nil {
		fmt.Fprintf(cc.stderr, "spool consume: %v\n", err)
		return exitProblem
	}
	defer c.Close()
	if err := cc.position(c, topic, parts, from); err != nil {
		fmt.Fprintf(cc.stderr, "spool consume: %v\n", err)
		return exitProblem
	}
	return cc.consume(ctx, topic, from, c.Poll)
}

// consume prints what poll returns - from a data directory's consumer or a
// Kafka client - until --count records are printed, --timeout passes
// without a record, poll fails, or ctx ends (a signal: exit status 0).
func (cc *consoleConsumer) consume(ctx context.Context, topic string, from startPosition, poll func(context.Context) ([]spool.Record, error)) int {
	if from.kind == "latest" {
		// The default, and it prints nothing until a record comes: say
		// so, or a new user sees a command that hangs.
		fmt.Fprintf(cc.stderr, "spool consume: reading %s from the latest offset; waiting for new records (--from earliest to read what is there)\n", topic)
	}

	last := time.Now() // when the last record came
	for cc.count == 0 || cc.printed < cc.count {
		pollCtx, cancel := ctx, context.CancelFunc(func() {})
		if cc.timeout > 0 {
			pollCtx, cancel = context.WithDeadline(ctx, last.Add(cc.timeout))
		}
		recs, err := poll(pollCtx)
		cancel()
		if werr := cc.print(recs); werr != nil {
			fmt.Fprintf(cc.stderr, "spool consume: writing: %v\n", werr)
			return exitProblem
		}
		if len(recs) > 0 {
			last = time.Now()
		}
		switch {
		case ctx.Err() != nil:
			return exitOK // a signal: stop as asked
		case err != nil && !errors.Is(err, context.DeadlineExceeded):
			fmt.Fprintf(cc.stderr, "spool consume: %v\n", err)
			return exitProblem
		case cc.timeout > 0 && len(recs) == 0 && time.Since(last) >= cc.timeout:
			if cc.count > 0 && cc.printed < cc.count {
				fmt.Fprintf(cc.stderr, "spool consume: no record for %v: stopping after %d of %d records\n", cc.timeout, cc.printed, cc.count)
				return exitProblem
			}
			return exitOK
		}
	}
	return exitOK
}

// position assigns the partitions and moves each where from says.
func (cc *consoleConsumer) position(c *spool.Consumer, topic string, parts []spool.PartitionDescription, from startPosition) error {
	ids := make([]int32, len(parts))
	for i, p := range parts {
		ids[i] = p.Partition
	}
	if err := c.Assign(topic, ids...); err != nil {
		return err
	}
	switch from.kind {
	case "earliest":
		return c.SeekToStart(topic, ids...)
	case "latest":
		return c.SeekToEnd(topic, ids...)
	case "time":
		return c.SeekToTime(topic, from.time, ids...)
	}
	for _, p := range parts {
		// The consumer would move an offset outside the log to the end
		// (AutoOffsetReset latest); before the start, the start is meant.
		off := min(max(from.offset, p.StartOffset), p.HighWatermark)
		if err := c.Seek(topic, p.Partition, off); err != nil {
			return err
		}
	}
	return nil
}

// print writes records, up to --count in all, and flushes them.
func (cc *consoleConsumer) print(recs []spool.Record) error {
	if len(recs) == 0 {
		return nil
	}
	if cc.count > 0 {
		recs = recs[:min(int64(len(recs)), cc.count-cc.printed)]
	}
	var num [40]byte
	for _, r := range recs {
		if cc.printOffsets {
			cc.out.Write(strconv.AppendInt(num[:0], int64(r.Partition), 10))
			cc.out.WriteByte(' ')
			cc.out.Write(strconv.AppendInt(num[:0], r.Offset, 10))
			cc.out.WriteByte(' ')
		}
		if cc.printKeys {
			writeNullable(cc.out, r.Key)
			cc.out.WriteByte('\t')
		}
		writeNullable(cc.out, r.Value)
		cc.out.WriteByte('\n')
	}
	cc.printed += int64(len(recs))
	return cc.out.Flush()
}

// writeNullable writes b, or null for nil, as Kafka's console consumer
// does.
func writeNullable(w *bufio.Writer, b []byte) {
	if b == nil {
		w.WriteString("null")
		return
	}
	w.Write(b)
}

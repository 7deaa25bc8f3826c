package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"sync"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/partition"
)

// runProduce implements "spool produce", the console producer: every line
// of stdin becomes a record, sent through a spool.Producer (which batches
// them). It returns 0 once every record is delivered, 1 if any failed or
// stdin could not be read, 2 on usage errors.
//
// With --print-acks it prints "PARTITION OFFSET" for each record from the
// producer's callback, that is only once the record is written (under the
// Sync flush policy, on stable storage): a printed ack survives a crash of
// the process at any moment after it, which is what the crash test checks.
// Acks of one partition come in the order of the lines.
func runProduce(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("produce", flag.ContinueOnError)
	fs.SetOutput(stderr)
	bf := addBrokerFlags(fs, withFlush)
	topic := fs.String("topic", "", "the `topic` to produce to (created, with one partition, if it does not exist)")
	keySep := fs.String("key-separator", "", "split each line at the first `sep`arator: the text before it is the key, after it the value; a line without it has no key (default: no keys)")
	printAcks := fs.Bool("print-acks", false, "print \"PARTITION OFFSET\" for each record once it is written")
	part := fs.Int("partition", -1, "produce every record to this `partition` (default: the default partitioner's choice)")
	var cfg spool.ProducerConfig
	acksFlag(fs, &cfg.Acks)
	linger := fs.Duration("linger", spool.DefaultLinger, "how long a batch waits for more records before it is written (linger.ms); 0: no wait")
	batchBytes := fs.Int("batch-bytes", spool.DefaultBatchBytes, "the `size` at which a batch is written without waiting out --linger (batch.size)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: spool produce --topic T [flags] < FILE\n\n")
		fmt.Fprintf(fs.Output(), "Reads stdin and produces each line (without its newline) as a record, like\n")
		fmt.Fprintf(fs.Output(), "kafka-console-producer. At the end of the input it waits until every record is\n")
		fmt.Fprintf(fs.Output(), "delivered. Exits 1 if any record failed (each failure is printed on stderr).\n\nFlags:\n")
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
	case *batchBytes <= 0:
		return usageError(fs, "--batch-bytes must be positive")
	case *linger < 0:
		return usageError(fs, "--linger must not be negative")
	}
	cfg.Linger = lingerConfig(*linger)
	cfg.BatchBytes = *batchBytes
	if *part >= 0 {
		cfg.Partitioner = partition.ManualPartitioner()
	}

	b, ok := bf.open("spool produce", useOrCreate, stderr)
	if !ok {
		return exitProblem
	}
	// Lines longer than the topic takes are skipped, not buffered whole. A
	// topic that does not exist yet is created with the defaults.
	maxLine := log.DefaultMaxMessageBytes
	if d, err := b.DescribeTopic(*topic); err == nil {
		maxLine = d.Config.MaxMessageBytes
		if *part >= len(d.Partitions) {
			fmt.Fprintf(stderr, "spool produce: %v: %s-%d (the topic has %d)\n", spool.ErrUnknownPartition, *topic, *part, len(d.Partitions))
			return closeBroker("spool produce", b, exitProblem, stderr)
		}
	} else if !errors.Is(err, spool.ErrUnknownTopic) {
		fmt.Fprintf(stderr, "spool produce: %v\n", err)
		return closeBroker("spool produce", b, exitProblem, stderr)
	}
	p, err := b.NewProducer(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "spool produce: %v\n", err)
		return closeBroker("spool produce", b, exitProblem, stderr)
	}
	cp := &consoleProducer{
		p: p, topic: *topic, partition: int32(*part), maxLine: maxLine,
		stdout: stdout, stderr: stderr, printAcks: *printAcks,
	}
	if *keySep != "" {
		cp.keySep = []byte(*keySep)
	}

	// Lines are read on a goroutine of their own: a signal must not wait
	// for stdin, which may never end.
	done := make(chan error, 1)
	go func() { done <- cp.produceLines(stdin) }()
	code := exitOK
	select {
	case err := <-done:
		if err != nil {
			fmt.Fprintf(stderr, "spool produce: reading stdin: %v\n", err)
			code = exitProblem
		}
	case <-ctx.Done():
		cp.stop()
		fmt.Fprintf(stderr, "spool produce: interrupted: delivering the lines read so far\n")
	}
	if err := p.Flush(context.Background()); err != nil {
		fmt.Fprintf(stderr, "spool produce: flush: %v\n", err)
		code = exitProblem
	}
	if err := p.Close(); err != nil {
		fmt.Fprintf(stderr, "spool produce: close producer: %v\n", err)
		code = exitProblem
	}
	cp.mu.Lock()
	if cp.failed > 0 {
		fmt.Fprintf(stderr, "spool produce: %d of %d records failed\n", cp.failed, cp.produced)
		code = exitProblem
	}
	cp.mu.Unlock()
	return closeBroker("spool produce", b, code, stderr)
}

// consoleProducer produces lines and reports their fate.
type consoleProducer struct {
	p         *spool.Producer
	topic     string
	partition int32  // -1: the partitioner chooses
	keySep    []byte // nil: no keys
	maxLine   int

	// stopMu is held around each Produce, so that once stop returns no
	// record is produced: the producer can be closed without failing one.
	stopMu  sync.Mutex
	stopped bool

	// mu serialises the callbacks' output and counts.
	mu        sync.Mutex
	stdout    io.Writer
	stderr    io.Writer
	printAcks bool
	ack       []byte
	produced  int // records handed to the producer (or failed before)
	failed    int
}

// produceLines produces each line of r until its end, or until stop. It
// returns the error that ended reading, nil at the end of the input.
func (cp *consoleProducer) produceLines(r io.Reader) error {
	br := bufio.NewReaderSize(r, 64<<10)
	buf := make([]byte, 0, 4<<10) // never nil: an empty line is an empty value, not a tombstone
	for lineNo := 1; ; lineNo++ {
		line, n, err := readLine(br, buf, cp.maxLine)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		buf = line[:0] // keep what the buffer grew to
		if n > cp.maxLine {
			cp.mu.Lock()
			cp.produced++
			cp.mu.Unlock()
			cp.callback(lineNo)(spool.RecordMetadata{}, fmt.Errorf("%w: the line has %d bytes, the topic takes batches of %d", spool.ErrRecordTooLarge, n, cp.maxLine))
			continue
		}
		rec := spool.Record{Topic: cp.topic, Partition: cp.partition, Value: line}
		if cp.keySep != nil {
			if k, v, ok := bytes.Cut(line, cp.keySep); ok {
				rec.Key, rec.Value = k, v
			}
		}
		if !cp.produce(rec, lineNo) {
			return nil
		}
	}
}

// produce hands a record to the producer, unless stopped. The producer
// copies the record, so line's buffer can be reused at once.
func (cp *consoleProducer) produce(rec spool.Record, lineNo int) bool {
	cp.stopMu.Lock()
	defer cp.stopMu.Unlock()
	if cp.stopped {
		return false
	}
	cp.mu.Lock()
	cp.produced++
	cp.mu.Unlock()
	// Not the command's context: a signal stops reading, but what was
	// read is delivered.
	cp.p.Produce(context.Background(), rec, cp.callback(lineNo))
	return true
}

// stop makes produceLines return before its next record.
func (cp *consoleProducer) stop() {
	cp.stopMu.Lock()
	cp.stopped = true
	cp.stopMu.Unlock()
}

// callback returns the delivery callback of line lineNo: it prints the ack
// or the error. Writing the ack straight to stdout (os.Stdout is
// unbuffered) means a printed ack is never held back in a buffer, and is
// never printed before the record is written.
func (cp *consoleProducer) callback(lineNo int) func(spool.RecordMetadata, error) {
	return func(md spool.RecordMetadata, err error) {
		cp.mu.Lock()
		defer cp.mu.Unlock()
		if err != nil {
			cp.failed++
			fmt.Fprintf(cp.stderr, "spool produce: line %d: %v\n", lineNo, err)
			return
		}
		if cp.printAcks {
			cp.ack = strconv.AppendInt(cp.ack[:0], int64(md.Partition), 10)
			cp.ack = append(cp.ack, ' ')
			cp.ack = strconv.AppendInt(cp.ack, md.Offset, 10)
			cp.ack = append(cp.ack, '\n')
			cp.stdout.Write(cp.ack)
		}
	}
}

// readLine reads the next line from r into buf[:0], without its '\n'. It
// returns the line, its full length n and an error: io.EOF once the input
// is used up (a last line without a newline is returned first, as a
// line). A line longer than limit is read to its end but only its first
// limit bytes are kept, so memory stays bounded; n > limit says so.
func readLine(r *bufio.Reader, buf []byte, limit int) (line []byte, n int, err error) {
	line = buf[:0]
	for {
		chunk, err := r.ReadSlice('\n')
		if err == nil {
			chunk = chunk[:len(chunk)-1]
		}
		n += len(chunk)
		if keep := min(len(chunk), limit-len(line)); keep > 0 {
			line = append(line, chunk[:keep]...)
		}
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF && n > 0:
			return line, n, nil
		}
		return line, n, err
	}
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/segment"
)

// maxShownBytes is how much of a key or value dump --records shows.
const maxShownBytes = 60

// dumper prints segment files. It counts the problems it finds, which
// decide the exit status.
type dumper struct {
	out         io.Writer
	records     bool // print each record
	verifyIndex bool // print only index mismatches; check a .log's indexes too
	problems    int
	it          record.Iterator
}

// runDump implements "spool dump". It dumps each file in turn, whatever
// happened to the ones before, and returns 1 if any could not be read or
// held a problem (a batch that does not frame or verify, records that do
// not decode, an index entry that disagrees with its log), 0 otherwise, 2
// on usage errors.
func runDump(_ context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dump", flag.ContinueOnError)
	fs.SetOutput(stderr)
	records := fs.Bool("records", false, "also print every record of every batch (offset, timestamp, key, value, headers)")
	verify := fs.Bool("verify-index", false, "print only the index entries that disagree with the .log; given a .log, check its .index and .timeindex too")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: spool dump [--records] [--verify-index] FILE|DIR...\n\n")
		fmt.Fprintf(fs.Output(), "Prints segment files like Kafka's DumpLogSegments: a .log's batches (one line each),\n")
		fmt.Fprintf(fs.Output(), "a .index's or .timeindex's entries checked against the segment's .log, a .txnindex's\n")
		fmt.Fprintf(fs.Output(), "aborted transactions, or a checkpoint file; transaction markers show as\n")
		fmt.Fprintf(fs.Output(), "endTxnMarker: COMMIT|ABORT coordinatorEpoch: N; a log's directory (a partition's, or __cluster_metadata-0) stands\n")
		fmt.Fprintf(fs.Output(), "for its checkpoint and its .log files in offset order.\n")
		fmt.Fprintf(fs.Output(), "Exits 1 if a file holds a problem, 2 on usage errors.\n\nFlags:\n")
		printFlags(fs)
	}
	positional, ok, code := parsePositional(fs, args)
	if !ok {
		return code
	}
	if len(positional) == 0 {
		fmt.Fprintf(stderr, "spool dump: no files given\n")
		fs.Usage()
		return exitUsage
	}
	d := &dumper{out: stdout, records: *records, verifyIndex: *verify}
	var paths []string
	for _, path := range positional {
		paths = append(paths, d.expandDir(path)...)
	}
	for i, path := range paths {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		d.dumpFile(path)
	}
	if d.problems > 0 {
		return exitProblem
	}
	return exitOK
}

// expandDir returns path itself, or if it is a directory, its checkpoint
// (if any) and its segments' .log files in offset order. A directory with
// neither is a problem.
func (d *dumper) expandDir(path string) []string {
	st, err := os.Stat(path)
	if err != nil || !st.IsDir() {
		return []string{path} // dumpFile reports what is wrong
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		d.problem("%v", err)
		return nil
	}
	var out []string
	if _, err := os.Stat(filepath.Join(path, log.CheckpointFile)); err == nil {
		out = append(out, filepath.Join(path, log.CheckpointFile))
	}
	var bases []int64
	for _, e := range entries {
		if base, suffix, ok := segmentFile(e.Name()); ok && suffix == segment.LogSuffix {
			bases = append(bases, base)
		}
	}
	slices.Sort(bases)
	for _, b := range bases {
		out = append(out, filepath.Join(path, segment.FileName(b, segment.LogSuffix)))
	}
	if len(out) == 0 {
		d.problem("%s: a directory with no %s and no segment files", path, log.CheckpointFile)
	}
	return out
}

// problem prints a problem and counts it.
func (d *dumper) problem(format string, args ...any) {
	d.problems++
	fmt.Fprintf(d.out, "PROBLEM: "+format+"\n", args...)
}

// dumpFile dumps one file, by its name.
func (d *dumper) dumpFile(path string) {
	name := filepath.Base(path)
	if name == log.CheckpointFile {
		d.dumpCheckpoint(path)
		return
	}
	base, suffix, ok := segmentFile(name)
	if !ok && filepath.Ext(name) == segment.LogSuffix {
		// A .log needs no base offset to be dumped: batches carry theirs.
		d.dumpLog(path)
		return
	}
	if !ok {
		d.problem("%s: not a .log, an index named by its segment's base offset (%s, %s) or a %s file",
			path, segment.FileName(0, segment.IndexSuffix), segment.FileName(0, segment.TimeIndexSuffix), log.CheckpointFile)
		return
	}
	switch suffix {
	case segment.TxnIndexSuffix:
		d.dumpTxnIndex(path, base)
	case segment.LogSuffix:
		d.dumpLog(path)
		if d.verifyIndex {
			dir := filepath.Dir(path)
			for _, s := range []string{segment.IndexSuffix, segment.TimeIndexSuffix} {
				fmt.Fprintln(d.out)
				d.dumpIndex(filepath.Join(dir, segment.FileName(base, s)), base, s, false)
			}
		}
	default:
		d.dumpIndex(path, base, suffix, true)
	}
}

// dumpLog prints a .log file's batches, one line each, and with records
// set each record, until the end of the file or the first batch that
// cannot be framed.
func (d *dumper) dumpLog(path string) {
	r, err := openLog(path)
	if err != nil {
		d.problem("%v", err)
		return
	}
	defer r.Close()
	fmt.Fprintf(d.out, "Dumping %s (%d bytes)\n", path, r.Size())
	var batches, records int
	for {
		b, pos, err := r.next()
		if err == io.EOF {
			break
		}
		var fe *framingError
		if errors.As(err, &fe) {
			d.problem("%s: position %d: cannot frame a batch: %v", path, pos, fe.Err)
			if after, ok, serr := r.validBatchAfter(pos); serr != nil {
				fmt.Fprintf(d.out, "  (looking for a valid batch after it: %v)\n", serr)
			} else if ok {
				fmt.Fprintf(d.out, "  a valid batch starts at position %d: the damage is inside the file\n", after)
			} else {
				fmt.Fprintf(d.out, "  no valid batch follows in the last %d bytes: a torn tail, if this is a partition's last segment\n", r.Size()-pos)
			}
			break
		}
		if err != nil {
			d.problem("%s: position %d: %v", path, pos, err)
			break
		}
		batches++
		verr := b.Verify()
		fmt.Fprintln(d.out, batchLine(b, pos))
		if verr != nil {
			d.problem("%s: position %d: batch at offset %d: %v", path, pos, b.BaseOffset(), verr)
		}
		if d.records {
			records += d.dumpRecords(path, b, pos, verr)
		}
	}
	if d.records {
		fmt.Fprintf(d.out, "%d batches, %d records\n", batches, records)
	} else {
		fmt.Fprintf(d.out, "%d batches\n", batches)
	}
}

// batchLine describes a batch header on one line, in the spirit of Kafka's
// DumpLogSegments.
func batchLine(b record.Batch, pos int64) string {
	line := fmt.Sprintf("position: %d baseOffset: %d lastOffset: %d count: %d size: %d crcValid: %t codec: %s"+
		" firstTimestamp: %d maxTimestamp: %d producerId: %d producerEpoch: %d baseSequence: %d partitionLeaderEpoch: %d",
		pos, b.BaseOffset(), b.LastOffset(), b.NumRecords(), b.Size(), b.ComputeCRC() == b.CRC(), codecName(b.Compression()),
		b.FirstTimestamp(), b.MaxTimestamp(), b.ProducerID(), b.ProducerEpoch(), b.BaseSequence(), b.PartitionLeaderEpoch())
	if b.LogAppendTime() {
		line += " timestampType: LogAppendTime"
	}
	if b.IsTransactional() {
		line += " isTransactional: true"
	}
	if b.IsControl() {
		line += " isControl: true"
		// An end transaction marker says which, and from which
		// coordinator epoch (Kafka prints it per record).
		if m, err := record.ParseControlBatch(b); err == nil {
			line += fmt.Sprintf(" endTxnMarker: %s coordinatorEpoch: %d", m.Type, m.CoordinatorEpoch)
		}
	}
	if b.HasDeleteHorizon() {
		line += " deleteHorizon: true"
	}
	return line
}

// codecName names a codec, including ones this build does not know.
func codecName(c record.Codec) string {
	switch c {
	case record.None, record.Gzip, record.Snappy, record.LZ4, record.ZSTD:
		return c.String()
	}
	return "unknown(" + strconv.Itoa(int(c)) + ")"
}

// dumpRecords prints a batch's records and returns how many it printed.
// A batch that failed verification (verr) is not decoded: its bytes
// cannot be trusted to be records.
func (d *dumper) dumpRecords(path string, b record.Batch, pos int64, verr error) int {
	if verr != nil {
		fmt.Fprintf(d.out, "| records not decoded: the batch is invalid\n")
		return 0
	}
	n := 0
	d.it.Reset(b)
	for d.it.Next() {
		r := d.it.Record()
		ts := record.NoTimestamp
		if !r.Timestamp.IsZero() {
			ts = r.Timestamp.UnixMilli()
		}
		fmt.Fprintf(d.out, "| offset: %d timestamp: %d key: %s valueSize: %d value: %s headers: %d\n",
			r.Offset, ts, showBytes(r.Key), len(r.Value), showBytes(r.Value), len(r.Headers))
		n++
	}
	if err := d.it.Err(); err != nil {
		d.problem("%s: position %d: records of the batch at offset %d: %v", path, pos, b.BaseOffset(), err)
	}
	return n
}

// showBytes quotes a key or value, cut to maxShownBytes; nil is null.
func showBytes(p []byte) string {
	if p == nil {
		return "null"
	}
	if len(p) <= maxShownBytes {
		return strconv.Quote(string(p))
	}
	return fmt.Sprintf("%s...(%d bytes)", strconv.Quote(string(p[:maxShownBytes])), len(p))
}

// dumpIndex prints an index file's entries, each checked against the
// segment's .log (in the same directory); with verifyIndex only the
// entries that disagree are printed. A missing file is a problem when it
// was asked for (named), not when it was looked for beside a .log: the log
// rebuilds missing indexes.
func (d *dumper) dumpIndex(path string, base int64, suffix string, named bool) {
	x, err := readIndex(path, base, suffix)
	if err != nil {
		switch {
		case errors.Is(err, os.ErrNotExist) && !named:
			fmt.Fprintf(d.out, "No %s (the log rebuilds a missing index)\n", path)
		case errors.Is(err, os.ErrNotExist):
			d.problem("%s: no such file", path)
		default:
			d.problem("%v", err)
		}
		return
	}
	note := ""
	if x.Untrimmed {
		note = ", not trimmed: the log is open or was not closed cleanly"
	}
	fmt.Fprintf(d.out, "Dumping %s (base offset %d, %d entries, %d bytes%s)\n", path, base, x.Len(), x.FileSize, note)

	var off, tim *indexFile
	if isTime(suffix) {
		tim = x
	} else {
		off = x
	}
	c := newIndexChecker(off, tim)
	logPath := filepath.Join(filepath.Dir(path), segment.FileName(base, segment.LogSuffix))
	checked, err := walkHeaders(logPath, c)
	if err != nil {
		fmt.Fprintf(d.out, "  not all entries checked against %s: %v\n", logPath, err)
	}
	v := c.verdict(x)
	if !checked {
		v = &indexVerdict{UncheckedFrom: 0}
	}
	for i := range x.Len() {
		why, bad := v.Problems[i]
		unchecked := i >= v.UncheckedFrom
		if d.verifyIndex && !bad && !unchecked {
			continue
		}
		var line string
		if tim != nil {
			e := x.Times[i]
			line = fmt.Sprintf("timestamp: %d offset: %d", e.Timestamp, e.Offset)
		} else {
			e := x.Offsets[i]
			line = fmt.Sprintf("offset: %d position: %d", e.Offset, e.Position)
		}
		switch {
		case bad:
			d.problems++
			line += " MISMATCH: " + why
		case unchecked && checked:
			line += " (not checked: past where the log stops)"
		}
		fmt.Fprintln(d.out, line)
	}
	if checked {
		fmt.Fprintf(d.out, "%d entries checked against %s: %d mismatched, %d not checked\n",
			x.Len(), filepath.Base(logPath), len(v.Problems), x.Len()-v.UncheckedFrom)
	} else {
		fmt.Fprintf(d.out, "%d entries, not checked\n", x.Len())
	}
}

// walkHeaders feeds the batches of the .log at path to c, up to the first
// that cannot be framed, and finishes c. It reports whether the log could
// be read at all; an error describes why it could not, or where it stopped
// early.
func walkHeaders(path string, c *indexChecker) (bool, error) {
	r, err := openLog(path)
	if err != nil {
		return false, err
	}
	defer r.Close()
	var end, next int64
	if base, _, ok := segmentFile(filepath.Base(path)); ok {
		next = base
	}
	var stopped error
	for {
		b, pos, err := r.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			stopped = err
			break
		}
		c.observe(headerOf(b, pos))
		end, next = pos+int64(b.Size()), max(next, b.NextOffset())
	}
	c.finish(end, next, stopped == nil)
	if stopped != nil {
		return true, fmt.Errorf("the log stops early: %w", stopped)
	}
	return true, nil
}

// dumpTxnIndex prints a .txnindex file's aborted transactions, one line
// each. A file that does not decode whole is a problem; the entries before
// the damage are printed.
func (d *dumper) dumpTxnIndex(path string, base int64) {
	data, err := os.ReadFile(path)
	if err != nil {
		d.problem("%v", err)
		return
	}
	fmt.Fprintf(d.out, "Dumping %s (base offset %d, %d bytes)\n", path, base, len(data))
	entries, err := segment.ParseTxnIndex(data)
	for _, e := range entries {
		fmt.Fprintf(d.out, "producerId: %d firstOffset: %d lastOffset: %d lastStableOffset: %d\n",
			e.ProducerID, e.FirstOffset, e.LastOffset, e.LastStableOffset)
	}
	if err != nil {
		d.problem("%s: %v (the partition rebuilds a damaged index when it opens)", path, err)
	}
	fmt.Fprintf(d.out, "%d aborted transactions\n", len(entries))
}

// dumpCheckpoint prints a log's checkpoint file.
func (d *dumper) dumpCheckpoint(path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		d.problem("%v", err)
		return
	}
	fmt.Fprintf(d.out, "Dumping %s\n", path)
	c, err := log.ParseCheckpoint(data)
	if err != nil {
		d.problem("%s: %v", path, err)
		return
	}
	fmt.Fprintf(d.out, "recoveryPoint: %d recoverySegment: %d recoveryPosition: %d logStartOffset: %d cleanShutdown: %t\n",
		c.RecoveryPoint.Offset, c.RecoveryPoint.SegmentBase, c.RecoveryPoint.Position, c.StartOffset, c.CleanShutdown)
}

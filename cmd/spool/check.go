package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spoolmq/spool/index"
	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/partition"
	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/segment"
)

// severity grades what check reports. Only errors make it fail.
type severity int

const (
	// info is worth knowing and needs nothing done: a missing index (the
	// log rebuilds it), the checkpoint's contents.
	info severity = iota
	// warning is something the next open repairs by itself, or that does
	// not threaten data: a torn tail left by a crash, a damaged checkpoint,
	// index damage in a segment that recovery rebuilds anyway.
	warning
	// corrupt is damage: data that does not verify, offsets out of order,
	// an index that disagrees with its log.
	corrupt
)

func (s severity) String() string {
	switch s {
	case info:
		return "info"
	case warning:
		return "warning"
	}
	return "error"
}

// checker verifies partition directories and reports what it finds. It
// opens files read-only and never takes the log's lock.
type checker struct {
	out        io.Writer
	quiet      bool
	errors     int
	warnings   int
	it         record.Iterator
	epochs     []partition.EpochEntry // of the partition being checked, from its batch headers
	epochsFrom int64                  // the offset from which they are collected: the log start offset
	maxPID     int64                  // the highest producer id in any batch checked, -1 for none

	partitions, segments, batches, records int64
}

// runCheck implements "spool check": it verifies the data directory, or
// the single partition directory, at args' PATH: everything spool serve
// reads when it opens the directory, and every batch and index entry. It
// returns 1 if it found something serve would refuse to open, or corrupt
// data, 0 if not (warnings alone do not count), 2 on usage errors or when
// PATH cannot be read.
func runCheck(_ context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quiet := fs.Bool("quiet", false, "print only errors and warnings, no progress, info or summary")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: spool check [--quiet] PATH\n\n")
		fmt.Fprintf(fs.Output(), "Verifies a broker's data directory, or one partition directory (one holding .log\n")
		fmt.Fprintf(fs.Output(), "segment files), without modifying anything or taking its lock. In a data directory it\n")
		fmt.Fprintf(fs.Output(), "checks what spool serve checks when it opens it: the topic registry (topics.json: its\n")
		fmt.Fprintf(fs.Output(), "CRC, version, topic names, ids and settings), that partition directories have a\n")
		fmt.Fprintf(fs.Output(), "registry at all, each partition's partition.metadata against it, meta.properties and\n")
		fmt.Fprintf(fs.Output(), "producer-ids; in every partition (and a clustered broker's replicas/) the log's\n")
		fmt.Fprintf(fs.Output(), "checkpoint, the leader-epoch-checkpoint, the replication-offset-checkpoint, the\n")
		fmt.Fprintf(fs.Output(), "producer snapshots and an interrupted compaction's .swap files; and that every batch\n")
		fmt.Fprintf(fs.Output(), "frames and has a valid CRC-32C, records decode, offsets increase within and across\n")
		fmt.Fprintf(fs.Output(), "segments, and the indexes agree with the logs. Findings are printed as\n")
		fmt.Fprintf(fs.Output(), "\"error|warning|info: FILE: [position N: ]...\", each saying what the broker does\n")
		fmt.Fprintf(fs.Output(), "about it and, where something needs doing, what.\n\n")
		fmt.Fprintf(fs.Output(), "Exit status: 1 where spool serve would refuse to open the directory or data is corrupt\n")
		fmt.Fprintf(fs.Output(), "(a damaged topics.json: see spool repair), 0 if not (warnings, such as the torn tail\n")
		fmt.Fprintf(fs.Output(), "a crash leaves, which the next open cuts, do not count), 2 on usage errors.\n\nFlags:\n")
		printFlags(fs)
	}
	positional, ok, code := parsePositional(fs, args)
	if !ok {
		return code
	}
	if len(positional) != 1 {
		fmt.Fprintf(stderr, "spool check: want exactly one PATH, got %d arguments\n", len(positional))
		fs.Usage()
		return exitUsage
	}
	root := positional[0]
	st, err := os.Stat(root)
	if err != nil {
		fmt.Fprintf(stderr, "spool check: %v\n", err)
		return exitUsage
	}
	if !st.IsDir() {
		fmt.Fprintf(stderr, "spool check: %s is not a directory (use spool dump for a single file)\n", root)
		return exitUsage
	}

	c := &checker{out: stdout, quiet: *quiet, maxPID: -1}
	entries, err := os.ReadDir(root)
	if err != nil {
		fmt.Fprintf(stderr, "spool check: %v\n", err)
		return exitUsage
	}
	if !hasLogFile(entries) {
		// Not a partition directory: it must be a data directory, or
		// "clean" would only mean that nothing was checked.
		if err := checkDataDir(root); err != nil {
			fmt.Fprintf(stderr, "spool check: %v; give a data directory or a partition directory (one holding .log files)\n", err)
			return exitUsage
		}
	}
	if hasLogFile(entries) {
		c.checkPartitionDir(partitionRole{dir: root})
	} else if !c.checkDataDir(root) {
		fmt.Fprintf(stderr, "spool check: cannot read %s\n", root)
		return exitUsage
	}
	if !c.quiet {
		verdict := "clean"
		if c.errors > 0 {
			verdict = "CORRUPT"
		}
		fmt.Fprintf(c.out, "checked %d partitions, %d segments, %d batches, %d records: %d errors, %d warnings: %s\n",
			c.partitions, c.segments, c.batches, c.records, c.errors, c.warnings, verdict)
	}
	if c.errors > 0 {
		return exitProblem
	}
	return exitOK
}

// report prints one finding about a file, at a byte position (pos < 0 for
// the file as a whole), and counts it. Info is not printed when quiet.
func (c *checker) report(sev severity, path string, pos int64, format string, args ...any) {
	switch sev {
	case corrupt:
		c.errors++
	case warning:
		c.warnings++
	case info:
		if c.quiet {
			return
		}
	}
	msg := fmt.Sprintf(format, args...)
	if pos >= 0 {
		fmt.Fprintf(c.out, "%s: %s: position %d: %s\n", sev, path, pos, msg)
	} else {
		fmt.Fprintf(c.out, "%s: %s: %s\n", sev, path, msg)
	}
}

// progress prints a line unless quiet.
func (c *checker) progress(format string, args ...any) {
	if !c.quiet {
		fmt.Fprintf(c.out, format+"\n", args...)
	}
}

// hasLogFile reports whether a directory listing holds a segment .log.
func hasLogFile(entries []os.DirEntry) bool {
	for _, e := range entries {
		if _, suffix, ok := segmentFile(e.Name()); ok && suffix == segment.LogSuffix && !e.IsDir() {
			return true
		}
	}
	return false
}

// logSummary is what checking a partition's log learnt that its other
// files are checked against.
type logSummary struct {
	start, end int64 // the log start offset the next open settles on, and the next offset
	// epochs are the leader-epoch entries the batch headers make: what
	// the next open rebuilds a damaged leader-epoch-checkpoint from.
	epochs []partition.EpochEntry
}

// checkPartition verifies one partition directory's log: its checkpoint,
// then each segment in offset order. ok is false when the directory
// cannot be read.
func (c *checker) checkPartition(dir string) (s logSummary, ok bool) {
	c.partitions++
	c.epochs = nil
	entries, err := os.ReadDir(dir)
	if err != nil {
		c.report(corrupt, dir, -1, "cannot read directory: %v", err)
		return s, false
	}
	var bases []int64 // of the .log files
	var leftovers []string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() {
			continue
		}
		base, suffix, ok := segmentFile(name)
		switch {
		case ok && suffix == segment.LogSuffix:
			bases = append(bases, base)
		case strings.HasSuffix(name, ".tmp"), strings.HasSuffix(name, ".rebuild"), strings.HasSuffix(name, ".deleted"):
			leftovers = append(leftovers, name)
		}
	}
	slices.Sort(bases)
	c.progress("partition %s: %d segments", dir, len(bases))
	for _, name := range leftovers {
		c.report(info, filepath.Join(dir, name), -1, "leftover of an interrupted write or deletion; the next open removes it")
	}
	for _, e := range entries { // in name order, so in offset order
		base, suffix, ok := segmentFile(e.Name())
		if _, found := slices.BinarySearch(bases, base); ok && suffix != segment.LogSuffix && !found {
			c.report(info, filepath.Join(dir, e.Name()), -1, "index without a %s file; the next open removes it", segment.LogSuffix)
		}
		// A compaction a crash interrupted after its swap file was
		// complete: the next open puts the swap in place of the segments
		// it covers, after walking its batch headers (segment.ScanEnd),
		// and refuses to open when that walk fails.
		if _, suffix, ok := segment.ParseFileName(e.Name()); ok && suffix == segment.LogSuffix+".swap" && !e.IsDir() {
			path := filepath.Join(dir, e.Name())
			if _, err := segment.ScanEnd(nil, path); err != nil {
				c.report(corrupt, path, -1, "an interrupted compaction's result, which the next open puts in place: %v: the log refuses to open (the broker keeps the partition OFFLINE); "+
					"delete the .swap files of this segment to keep the segments it would replace", err)
			} else {
				c.report(info, path, -1, "an interrupted compaction's result: the next open puts it in place of the segments it covers")
			}
		}
	}

	// Segments from recoverFrom on are the ones the next open checks
	// batch by batch and whose indexes it rebuilds (see log.Open): all of
	// them when the log was not closed cleanly and the checkpoint says
	// nothing more precise.
	cp, cpOK := c.readCheckpoint(dir)
	c.epochsFrom = cp.StartOffset // 0 without a checkpoint
	recoverFrom := int64(math.MaxInt64)
	if !cpOK || !cp.CleanShutdown {
		if len(bases) > 0 {
			recoverFrom = bases[0]
		}
		for _, b := range bases {
			if cpOK && b <= cp.RecoveryPoint.SegmentBase {
				recoverFrom = b
			}
		}
	}

	if len(bases) == 0 {
		if cpOK {
			s.start = max(cp.StartOffset, cp.RecoveryPoint.Offset)
			s.end = s.start
		}
		return s, true
	}
	var next int64 // the offset after the previous segment
	for i, base := range bases {
		c.segments++
		path := filepath.Join(dir, segment.FileName(base, segment.LogSuffix))
		if i > 0 && base < next {
			c.report(corrupt, path, 0, "segment base offset %d overlaps the previous segment, which ends before offset %d", base, next)
		}
		next = c.checkSegment(dir, base, i == len(bases)-1, base >= recoverFrom)
	}
	c.progress("  offsets %d..%d (next offset %d)", bases[0], next-1, next)
	s.start, s.end = bases[0], next
	if cpOK {
		cpPath := filepath.Join(dir, log.CheckpointFile)
		if cp.RecoveryPoint.Offset > next {
			// log.Open refuses this under the Sync flush policy, the
			// default of spool serve and of the library.
			c.report(corrupt, cpPath, -1, "recovery point %d is past the end of the log (next offset %d): records the log had made durable are gone, "+
				"and the broker keeps the partition OFFLINE under --flush sync (the default) rather than reuse their offsets; "+
				"restore the partition from a backup or a replica, or open it once with --flush none to continue from what is left",
				cp.RecoveryPoint.Offset, next)
		}
		if cp.StartOffset > next {
			c.report(warning, cpPath, -1, "log start offset %d is past the end of the log (next offset %d)", cp.StartOffset, next)
		}
		s.start = max(s.start, cp.StartOffset)
	}
	s.start = min(s.start, s.end)
	s.epochs = c.epochs
	return s, true
}

// readCheckpoint reads and reports a partition's checkpoint file. Neither
// a missing nor a damaged one is corruption: without it the next open
// checks every segment.
func (c *checker) readCheckpoint(dir string) (log.Checkpoint, bool) {
	path := filepath.Join(dir, log.CheckpointFile)
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		c.report(info, path, -1, "no checkpoint: the next open checks every segment")
		return log.Checkpoint{}, false
	case err != nil:
		c.report(corrupt, path, -1, "cannot read: %v: the log refuses to open (the broker keeps the partition OFFLINE)", err)
		return log.Checkpoint{}, false
	}
	cp, err := log.ParseCheckpoint(data)
	if err != nil {
		c.report(warning, path, -1, "%v: the next open ignores it and checks every segment", err)
		return log.Checkpoint{}, false
	}
	c.report(info, path, -1, "%s", cp)
	return cp, true
}

// checkSegment verifies one segment: every batch of its .log, then its
// indexes against the batches. last says whether it is the partition's
// last segment, where a tail that does not frame is a torn write, not
// damage; recovering whether the next open checks it batch by batch and
// rebuilds its indexes (the log was not closed cleanly). It returns the
// offset after the segment's last valid batch.
func (c *checker) checkSegment(dir string, base int64, last, recovering bool) int64 {
	path := filepath.Join(dir, segment.FileName(base, segment.LogSuffix))
	r, err := openLog(path)
	if err != nil {
		c.report(corrupt, path, -1, "cannot open: %v", err)
		return base
	}
	defer r.Close()

	off := c.loadIndex(dir, base, segment.IndexSuffix, last, recovering)
	tim := c.loadIndex(dir, base, segment.TimeIndexSuffix, last, recovering)
	ix := newIndexChecker(off, tim)

	expect := base   // the least base offset the next batch may have
	var end int64    // the end of the last batch that framed
	complete := true // whether the walk reached the end of the file
	for {
		b, pos, err := r.next()
		if err == io.EOF {
			break
		}
		complete = false
		var fe *framingError
		if errors.As(err, &fe) {
			c.badTail(r, pos, last, true, fe.Err)
			break
		}
		if err != nil {
			c.report(corrupt, path, pos, "cannot read: %v", err)
			break
		}
		complete = true
		c.batches++
		h := headerOf(b, pos)
		// As the next open rebuilds a damaged leader-epoch cache: from
		// the batches from the log start offset on.
		if e := h.LeaderEpoch; e >= 0 && h.NextOffset() > c.epochsFrom && (len(c.epochs) == 0 || e > c.epochs[len(c.epochs)-1].Epoch) {
			c.epochs = append(c.epochs, partition.EpochEntry{Epoch: e, StartOffset: h.BaseOffset})
		}
		if verr := b.Verify(); verr != nil {
			// A write torn by a crash can leave a whole-length batch
			// with the wrong bytes: the next open truncates it only if
			// it checks this segment, i.e. after an unclean shutdown.
			if last && recovering {
				if c.badTail(r, pos, last, false, verr) {
					complete = false
					break
				}
			} else {
				c.report(corrupt, path, pos, "batch at offset %d: %v", h.BaseOffset, verr)
			}
		} else {
			c.maxPID = max(c.maxPID, b.ProducerID())
			n := 0
			for c.it.Reset(b); c.it.Next(); {
				n++
			}
			c.records += int64(n)
			if err := c.it.Err(); err != nil {
				c.report(corrupt, path, pos, "batch at offset %d: records do not decode: %v", h.BaseOffset, err)
			}
		}
		switch {
		case h.BaseOffset < expect && pos == 0:
			c.report(corrupt, path, pos, "first batch has base offset %d, below the segment's base offset %d", h.BaseOffset, base)
		case h.BaseOffset < expect:
			c.report(corrupt, path, pos, "batch base offset %d does not follow the previous batch, which ends before offset %d", h.BaseOffset, expect)
		}
		if h.LastOffset-base > math.MaxInt32 {
			c.report(corrupt, path, pos, "last offset %d is too far from the segment's base offset %d for a 32-bit index entry", h.LastOffset, base)
		}
		ix.observe(h)
		expect = max(expect, h.NextOffset())
		end = h.End()
	}
	ix.finish(end, expect, complete)
	for _, x := range []*indexFile{off, tim} {
		if x != nil {
			c.reportIndex(x, ix.verdict(x), end, recovering)
		}
	}
	return expect
}

// badTail reports a batch that does not frame (framing) or does not
// verify at pos. At the end of the last segment, with no valid batch
// anywhere after it, it is a torn tail - what a crash in the middle of a
// write leaves - which the next open truncates: a warning. Anywhere else
// it is corruption. It reports whether it was a torn tail.
func (c *checker) badTail(r *logReader, pos int64, last, framing bool, cause error) bool {
	what := "batch does not verify"
	if framing {
		what = "cannot frame a batch"
	}
	if !last {
		c.report(corrupt, r.path, pos, "%s: %v (not the partition's last segment, so not a torn write)", what, cause)
		return false
	}
	after, found, err := r.validBatchAfter(pos)
	switch {
	case err != nil:
		c.report(corrupt, r.path, pos, "%s: %v (and reading on: %v)", what, cause, err)
	case found:
		c.report(corrupt, r.path, pos, "%s: %v; a valid batch follows at position %d, so the damage is inside the segment", what, cause, after)
	default:
		c.report(warning, r.path, pos, "torn tail: %s: %v; nothing valid follows in the last %d bytes, which the next open truncates", what, cause, r.Size()-pos)
		return true
	}
	return false
}

// loadIndex reads one of a segment's index files and reports its state:
// missing (info: the log rebuilds it), unreadable or malformed
// (corruption, or a warning where the next open rebuilds it anyway), left
// untrimmed (info on the last segment or one being recovered, a warning on
// a sealed one). It returns nil when there are no entries to check.
func (c *checker) loadIndex(dir string, base int64, suffix string, last, recovering bool) *indexFile {
	path := filepath.Join(dir, segment.FileName(base, suffix))
	x, err := readIndex(path, base, suffix)
	switch {
	case errors.Is(err, os.ErrNotExist):
		c.report(info, path, -1, "missing; the log rebuilds it from the %s", segment.LogSuffix)
		return nil
	case errors.Is(err, index.ErrCorrupt):
		c.report(c.indexSeverity(recovering), path, -1, "%v%s", err, rebuildNote(recovering))
		return nil
	case err != nil:
		c.report(corrupt, path, -1, "cannot read: %v", err)
		return nil
	}
	if x.Untrimmed {
		sev := warning
		if last || recovering {
			sev = info
		}
		c.report(sev, path, -1, "not trimmed (%d bytes for %d entries): the log is open or was not closed cleanly", x.FileSize, x.Len())
	}
	return x
}

// reportIndex reports the entries of x that disagree with the log, and
// how many could not be checked because the log stops short of them.
func (c *checker) reportIndex(x *indexFile, v *indexVerdict, end int64, recovering bool) {
	size, kind := int64(index.OffsetEntrySize), "offset index"
	if isTime(x.Suffix) {
		size, kind = index.TimeEntrySize, "time index"
	}
	for _, i := range sortedKeys(v.Problems) {
		c.report(c.indexSeverity(recovering), x.Path, int64(i)*size, "%s entry %d disagrees with the log: %s%s", kind, i, v.Problems[i], rebuildNote(recovering))
	}
	if n := x.Len() - v.UncheckedFrom; n > 0 {
		c.report(info, x.Path, int64(v.UncheckedFrom)*size, "%d entries from here not checked: the %s cannot be read past position %d", n, segment.LogSuffix, end)
	}
}

// indexSeverity grades index damage: corruption, unless the next open
// rebuilds the index anyway.
func (c *checker) indexSeverity(recovering bool) severity {
	if recovering {
		return warning
	}
	return corrupt
}

func rebuildNote(recovering bool) string {
	if recovering {
		return " (the log was not closed cleanly: the next open rebuilds this index)"
	}
	return ""
}

package main

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spoolmq/spool"
	spoollog "github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/segment"
)

// problemLines returns the output lines of a severity ("error", "warning",
// "info").
func problemLines(out, sev string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, sev+": ") {
			lines = append(lines, l)
		}
	}
	return lines
}

func TestCheckCleanPartition(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "topic-0")
	logs := makeLog(t, dir, 40)

	code, out, _ := runTool(t, "check", dir)
	require.Equal(t, exitOK, code, out)
	require.Empty(t, problemLines(out, "error"), out)
	require.Empty(t, problemLines(out, "warning"), out)
	require.Contains(t, out, fmt.Sprintf("checked 1 partitions, %d segments, 40 batches, %d records: 0 errors, 0 warnings: clean", len(logs), 40*recordsPerBatch))
	require.Contains(t, out, "clean shutdown true")

	code, out, _ = runTool(t, "check", "--quiet", dir)
	require.Equal(t, exitOK, code)
	require.Empty(t, out)
}

func TestCheckDataDirOfPartitions(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	makeDataDir(t, data, "orders", 2, 30)
	require.NoError(t, os.WriteFile(filepath.Join(data, "meta.json"), []byte("{}"), 0o644))

	code, out, _ := runTool(t, "check", data)
	require.Equal(t, exitOK, code, out)
	require.Empty(t, problemLines(out, "warning"), out)
	require.Contains(t, out, "checked 4 partitions") // and the offsets topic's 2
	require.Contains(t, out, "60 batches")
	require.Contains(t, out, "partition "+filepath.Join(data, "orders-0"))
	require.Contains(t, out, "partition "+filepath.Join(data, "orders-1"))
}

func TestCheckPartitionDirsWithoutRegistry(t *testing.T) {
	// Partition directories without a topics.json: the broker refuses to
	// guess which are data, so check fails too, and still checks them.
	data := t.TempDir()
	makeLog(t, filepath.Join(data, "orders-0"), 30)
	makeLog(t, filepath.Join(data, "orders-1"), 25)

	code, out, _ := runTool(t, "check", data)
	require.Equal(t, exitProblem, code, out)
	errs := problemLines(out, "error")
	require.Len(t, errs, 1, out)
	require.Contains(t, errs[0], "error: "+filepath.Join(data, "topics.json")+": missing, but "+data+" has partition directories (orders-0, ...)")
	require.Contains(t, errs[0], `run "spool repair `+data+`"`)
	require.Contains(t, out, "checked 2 partitions")
	require.Contains(t, out, "55 batches")
	_, err := spool.Open(data, spool.Options{})
	require.ErrorContains(t, err, "no topics.json")

	code, out, _ = runTool(t, "repair", data)
	require.Equal(t, exitOK, code, out)
	// The logs were made without the broker: no partition.metadata, so
	// the topic gets a new id, and each partition joins it.
	require.Contains(t, out, "topic orders: id ")
	require.Contains(t, out, "(a new id), 2 partitions")
	require.Contains(t, out, "info: "+filepath.Join(data, "orders-1")+": no partition.metadata: taken as partition 1 of topic \"orders\"")
	code, out, _ = runTool(t, "check", data)
	require.Equal(t, exitOK, code, out)
	b, err := spool.Open(data, spool.Options{})
	require.NoError(t, err)
	d, err := b.DescribeTopic("orders")
	require.NoError(t, err)
	require.Equal(t, int64(30*recordsPerBatch), d.Partitions[0].EndOffset)
	require.Equal(t, int64(25*recordsPerBatch), d.Partitions[1].EndOffset)
	require.NoError(t, b.Close())
}

func TestCheckBitFlipInSealedSegment(t *testing.T) {
	dir := t.TempDir()
	logs := makeLog(t, dir, 40)
	victim := logs[1] // sealed: not the last segment
	positions, _ := batchPositions(t, victim)
	pos := positions[2]
	modify(t, victim, func(b []byte) []byte {
		b[pos+100] ^= 0x04 // inside the records, covered by the CRC
		return b
	})

	code, out, _ := runTool(t, "check", dir)
	require.Equal(t, exitProblem, code, out)
	errs := problemLines(out, "error")
	require.Len(t, errs, 1, out)
	require.Contains(t, errs[0], fmt.Sprintf("%s: position %d: ", victim, pos))
	require.Contains(t, errs[0], "crc32c")
	require.Contains(t, out, "CORRUPT")
}

// tears are the ways a crash (or a stray writer) leaves a partial batch at
// the end of a partition's last segment. Each returns the position where
// the valid data ends.
var tears = []struct {
	name string
	tear func(t *testing.T, path string) int64
}{
	{"garbage appended", func(t *testing.T, path string) int64 {
		st, err := os.Stat(path)
		require.NoError(t, err)
		appendTo(t, path, []byte(strings.Repeat("\xab\x00garbage", 20)))
		return st.Size()
	}},
	{"last batch cut short", func(t *testing.T, path string) int64 {
		positions, _ := batchPositions(t, path)
		st, err := os.Stat(path)
		require.NoError(t, err)
		require.NoError(t, os.Truncate(path, st.Size()-30))
		return positions[len(positions)-1]
	}},
	{"header cut short", func(t *testing.T, path string) int64 {
		st, err := os.Stat(path)
		require.NoError(t, err)
		appendTo(t, path, make([]byte, 20))
		return st.Size()
	}},
	{"zeros where the last batch was", func(t *testing.T, path string) int64 {
		positions, _ := batchPositions(t, path)
		pos := positions[len(positions)-1]
		modify(t, path, func(b []byte) []byte {
			clear(b[pos:])
			return b
		})
		return pos
	}},
}

func TestCheckTornTailOfLastSegment(t *testing.T) {
	// After a clean close, a tear past the end the log recorded is cut by
	// the next open; one that cuts into what the log had made durable is
	// lost data, which the log refuses to open over (under Sync), and so
	// does check.
	for _, tc := range tears {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			logs := makeLog(t, dir, 40)
			last := logs[len(logs)-1]
			st, err := os.Stat(last)
			require.NoError(t, err)
			pos := tc.tear(t, last)

			code, out, _ := runTool(t, "check", dir)
			require.Contains(t, out, fmt.Sprintf("warning: %s: position %d: torn tail", last, pos))
			l, err := spoollog.Open(dir, spoollog.Options{SegmentBytes: testSegmentSize, IndexIntervalBytes: 128})
			if pos < st.Size() {
				require.Equal(t, exitProblem, code, out)
				require.Contains(t, out, fmt.Sprintf("error: %s: recovery point", filepath.Join(dir, spoollog.CheckpointFile)))
				require.ErrorIs(t, err, spoollog.ErrCorrupt)
				return
			}
			require.Equal(t, exitOK, code, out)
			require.Empty(t, problemLines(out, "error"), out)
			require.NoError(t, err)
			require.NoError(t, l.Close())
		})
	}
}

// crashedCopy makes a log with package log and copies its files while it
// is open, without closing: what a crash leaves behind (with the page
// cache intact). It returns the copy's directory.
func crashedCopy(t *testing.T, batches int) string {
	t.Helper()
	dir := t.TempDir()
	l := openTestLog(t, dir)
	defer l.Close()
	appendBatches(t, l, 0, batches)
	crashed := t.TempDir()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		if e.Name() == spoollog.CheckpointFile {
			// The background checkpoint may have recorded a recovery
			// point past batches these tests then tear - which a real
			// crash cannot do, and which the log rightly refuses. Copy
			// the state of a crash before any checkpoint: everything is
			// checked on open.
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if errors.Is(err, os.ErrNotExist) {
			continue // a temporary file the log's background checkpoint renamed
		}
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(crashed, e.Name()), data, 0o644))
	}
	return crashed
}

func TestCheckTornTailAgreesWithRecovery(t *testing.T) {
	// After a crash, what check calls a torn tail is what recovery cuts
	// off - and then check finds nothing more to say.
	for _, tc := range tears {
		t.Run(tc.name, func(t *testing.T) {
			dir := crashedCopy(t, 40)
			logs := segmentLogs(t, dir)
			last := logs[len(logs)-1]
			pos := tc.tear(t, last)

			code, out, _ := runTool(t, "check", dir)
			require.Equal(t, exitOK, code, out)
			require.Empty(t, problemLines(out, "error"), out)
			require.Contains(t, out, fmt.Sprintf("warning: %s: position %d: torn tail", last, pos))
			for _, w := range problemLines(out, "warning") {
				// Cutting into the last batch may also cut below the
				// recovery point the log had recorded (a real crash
				// cannot tear durable data; this test can).
				if !strings.Contains(w, "torn tail") {
					require.Contains(t, w, "recovery point", out)
				}
			}

			l, info, err := spoollog.OpenWithInfo(dir, spoollog.Options{SegmentBytes: testSegmentSize, IndexIntervalBytes: 128})
			require.NoError(t, err)
			require.Positive(t, info.TruncatedBytes)
			require.NoError(t, l.Close())
			st, err := os.Stat(last)
			require.NoError(t, err)
			require.Equal(t, pos, st.Size())

			code, out, _ = runTool(t, "check", dir)
			require.Equal(t, exitOK, code, out)
			require.Empty(t, problemLines(out, "warning"), out)
		})
	}
}

func TestCheckBadCRCAtTheEnd(t *testing.T) {
	// A whole-length last batch with a bad CRC is a torn write if the log
	// crashed (recovery checks CRCs and drops it), but damage after a
	// clean shutdown (the next open trusts the segment's batches).
	flip := func(t *testing.T, path string) int64 {
		positions, _ := batchPositions(t, path)
		pos := positions[len(positions)-1]
		modify(t, path, func(b []byte) []byte {
			b[pos+80] ^= 1
			return b
		})
		return pos
	}

	dir := crashedCopy(t, 40)
	logs := segmentLogs(t, dir)
	pos := flip(t, logs[len(logs)-1])
	code, out, _ := runTool(t, "check", dir)
	require.Equal(t, exitOK, code, out)
	require.Contains(t, out, fmt.Sprintf("warning: %s: position %d: torn tail: batch does not verify", logs[len(logs)-1], pos))

	dir = t.TempDir()
	logs = makeLog(t, dir, 40)
	pos = flip(t, logs[len(logs)-1])
	code, out, _ = runTool(t, "check", dir)
	require.Equal(t, exitProblem, code, out)
	require.Contains(t, out, fmt.Sprintf("error: %s: position %d: batch at offset", logs[len(logs)-1], pos))
}

func TestCheckDamageInsideLastSegment(t *testing.T) {
	// Bytes that do not frame, followed by valid batches, are damage even
	// in the last segment: recovery would drop acknowledged data.
	dir := t.TempDir()
	logs := makeLog(t, dir, 40)
	last := logs[len(logs)-1]
	positions, _ := batchPositions(t, last)
	require.Greater(t, len(positions), 2)
	pos := positions[1]
	modify(t, last, func(b []byte) []byte {
		binary.BigEndian.PutUint32(b[pos+8:], 7) // length less than a header
		return b
	})

	code, out, _ := runTool(t, "check", dir)
	require.Equal(t, exitProblem, code, out)
	require.Contains(t, out, fmt.Sprintf("error: %s: position %d: cannot frame a batch", last, pos))
	require.Contains(t, out, fmt.Sprintf("a valid batch follows at position %d", positions[2]))
}

func TestCheckGarbageInSealedSegmentHeader(t *testing.T) {
	for _, tc := range []struct {
		name  string
		at    int // offset inside the batch header
		bytes []byte
		want  string
	}{
		{"length", 8, []byte{0x7f, 0xff, 0xff, 0x00}, "cannot frame a batch"},
		{"magic", 16, []byte{0x63}, "magic 99"},
		{"last offset delta", 23, []byte{0xde, 0xad, 0xbe, 0xef}, "batch at offset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			logs := makeLog(t, dir, 40)
			victim := logs[0]
			positions, _ := batchPositions(t, victim)
			pos := positions[len(positions)/2]
			modify(t, victim, func(b []byte) []byte {
				copy(b[pos+int64(tc.at):], tc.bytes)
				return b
			})

			code, out, _ := runTool(t, "check", dir)
			require.Equal(t, exitProblem, code, out)
			errs := problemLines(out, "error")
			require.NotEmpty(t, errs, out)
			require.Contains(t, errs[0], fmt.Sprintf("%s: position %d: ", victim, pos))
			require.Contains(t, errs[0], tc.want)
		})
	}
}

func TestCheckPartialBatchAtEndOfSealedSegment(t *testing.T) {
	dir := t.TempDir()
	logs := makeLog(t, dir, 40)
	victim := logs[1]
	positions, _ := batchPositions(t, victim)
	st, err := os.Stat(victim)
	require.NoError(t, err)
	require.NoError(t, os.Truncate(victim, st.Size()-1))

	code, out, _ := runTool(t, "check", dir)
	require.Equal(t, exitProblem, code, out)
	errs := problemLines(out, "error")
	require.Len(t, errs, 1, out)
	require.Contains(t, errs[0], fmt.Sprintf("%s: position %d: cannot frame a batch", victim, positions[len(positions)-1]))
	require.Contains(t, errs[0], "not the partition's last segment")
	// The last batch's index entries cannot be checked; that is not
	// reported as more corruption.
	require.Contains(t, out, "not checked")
}

func TestCheckOffsetsGoingBackwards(t *testing.T) {
	// The base offset is outside the CRC (the log stamps it), so only
	// the offset checks can catch a bad one.
	dir := t.TempDir()
	logs := makeLog(t, dir, 40)
	victim := logs[0]
	positions, _ := batchPositions(t, victim)
	pos := positions[3]
	modify(t, victim, func(b []byte) []byte {
		binary.BigEndian.PutUint64(b[pos:], 1)
		return b
	})

	code, out, _ := runTool(t, "check", dir)
	require.Equal(t, exitProblem, code, out)
	require.Contains(t, out, fmt.Sprintf("error: %s: position %d: batch base offset 1 does not follow the previous batch", victim, pos))
}

func TestCheckOverlappingSegments(t *testing.T) {
	dir := t.TempDir()
	logs := makeLog(t, dir, 40)
	// Move the second segment down to base offset 1, inside the first.
	moved := filepath.Join(dir, segment.FileName(1, segment.LogSuffix))
	require.NoError(t, os.Rename(logs[1], moved))
	for _, s := range []string{segment.IndexSuffix, segment.TimeIndexSuffix} {
		require.NoError(t, os.Remove(sibling(logs[1], s)))
	}

	code, out, _ := runTool(t, "check", dir)
	require.Equal(t, exitProblem, code, out)
	require.Contains(t, out, fmt.Sprintf("error: %s: position 0: segment base offset 1 overlaps the previous segment", moved))
	// Its indexes are missing, which is only worth knowing.
	require.Contains(t, out, fmt.Sprintf("info: %s: missing", sibling(moved, segment.IndexSuffix)))
}

func TestCheckIndexes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		suffix string
		damage func([]byte) []byte
		want   string // in the error line
		pos    int64  // -1: no position
	}{
		{"offset entry shifted by one byte", segment.IndexSuffix, func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[8+4:], binary.BigEndian.Uint32(b[8+4:])+1)
			return b
		}, "is inside a batch, not at its start", 8},
		{"offset entry with the wrong offset", segment.IndexSuffix, func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[8:], binary.BigEndian.Uint32(b[8:])-1)
			return b
		}, "ends at offset", 8},
		{"offset entry past the log", segment.IndexSuffix, func(b []byte) []byte {
			last := len(b) - 8
			binary.BigEndian.PutUint32(b[last:], binary.BigEndian.Uint32(b[last:])+100)
			binary.BigEndian.PutUint32(b[last+4:], 1<<20)
			return b
		}, "past the last batch", -2},
		{"offset index of a partial entry", segment.IndexSuffix, func(b []byte) []byte {
			return append(b, 1, 2, 3)
		}, "index: corrupt", -1},
		{"offset entries out of order", segment.IndexSuffix, func(b []byte) []byte {
			copy(b[8:16], b[0:8])
			return b
		}, "index: corrupt", -1},
		{"time entry with a wrong timestamp", segment.TimeIndexSuffix, func(b []byte) []byte {
			last := len(b) - 12
			binary.BigEndian.PutUint64(b[last:], binary.BigEndian.Uint64(b[last:])+1000)
			return b
		}, "but the greatest batch timestamp up to offset", -2},
		{"time entry past the log", segment.TimeIndexSuffix, func(b []byte) []byte {
			last := len(b) - 12
			binary.BigEndian.PutUint32(b[last+8:], 1<<20)
			return b
		}, "past the end of the log", -2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			logs := makeLog(t, dir, 40)
			path := sibling(logs[1], tc.suffix)
			var size int64
			modify(t, path, func(b []byte) []byte {
				size = int64(len(b))
				return tc.damage(b)
			})
			pos := tc.pos
			if pos == -2 { // the last entry
				pos = size - 8
				if tc.suffix == segment.TimeIndexSuffix {
					pos = size - 12
				}
			}

			code, out, _ := runTool(t, "check", dir)
			require.Equal(t, exitProblem, code, out)
			errs := problemLines(out, "error")
			require.Len(t, errs, 1, out)
			prefix := fmt.Sprintf("error: %s: ", path)
			if pos >= 0 {
				prefix += fmt.Sprintf("position %d: ", pos)
			}
			require.True(t, strings.HasPrefix(errs[0], prefix), "%q does not start with %q", errs[0], prefix)
			require.Contains(t, errs[0], tc.want)
		})
	}
}

func TestCheckMissingIndexesAreInfo(t *testing.T) {
	dir := t.TempDir()
	logs := makeLog(t, dir, 40)
	for _, s := range []string{segment.IndexSuffix, segment.TimeIndexSuffix} {
		require.NoError(t, os.Remove(sibling(logs[0], s)))
	}
	// Debris the log cleans up on open: an index without its .log.
	orphan := filepath.Join(dir, segment.FileName(999999, segment.IndexSuffix))
	require.NoError(t, os.WriteFile(orphan, nil, 0o644))

	code, out, _ := runTool(t, "check", dir)
	require.Equal(t, exitOK, code, out)
	require.Contains(t, out, fmt.Sprintf("info: %s: missing", sibling(logs[0], segment.IndexSuffix)))
	require.Contains(t, out, fmt.Sprintf("info: %s: missing", sibling(logs[0], segment.TimeIndexSuffix)))
	require.Contains(t, out, fmt.Sprintf("info: %s: index without a .log", orphan))
	code, out, _ = runTool(t, "check", "--quiet", dir)
	require.Equal(t, exitOK, code)
	require.Empty(t, out)
}

func TestCheckOpenLog(t *testing.T) {
	// check takes no lock and writes nothing, so it can look at the
	// directory of a log that is open - which is also what a crash
	// leaves: indexes untrimmed (zeros after the entries, to the end of
	// their last growth step), an unclean checkpoint.
	dir := t.TempDir()
	l := openTestLog(t, dir)
	defer l.Close()
	appendBatches(t, l, 0, 30)

	code, out, _ := runTool(t, "check", dir)
	require.Equal(t, exitOK, code, out)
	require.Empty(t, problemLines(out, "warning"), out)
	require.Contains(t, out, "clean shutdown false")
	require.Contains(t, out, "not trimmed")
	require.Contains(t, out, "30 batches")

	code, out, _ = runTool(t, "dump", sibling(segmentLogs(t, dir)[len(segmentLogs(t, dir))-1], segment.IndexSuffix))
	require.Equal(t, exitOK, code, out)
	require.Contains(t, out, "not trimmed")
	require.Contains(t, out, "0 mismatched")
}

func TestCheckIndexDamageInRecoveredSegmentIsWarning(t *testing.T) {
	// When the log was not closed cleanly, the next open rebuilds the
	// indexes of the segments past the recovery point: damage there is
	// not worth failing for.
	dir := crashedCopy(t, 30)
	logs := segmentLogs(t, dir)
	idx := sibling(logs[len(logs)-1], segment.IndexSuffix)
	modify(t, idx, func(b []byte) []byte {
		binary.BigEndian.PutUint32(b[4:], binary.BigEndian.Uint32(b[4:])+1)
		return b
	})

	code, out, _ := runTool(t, "check", dir)
	require.Equal(t, exitOK, code, out)
	warns := problemLines(out, "warning")
	require.Len(t, warns, 1, out)
	require.Contains(t, warns[0], idx+": position 0: ")
	require.Contains(t, warns[0], "the next open rebuilds this index")
}

func TestCheckCheckpoint(t *testing.T) {
	dir := t.TempDir()
	makeLog(t, dir, 30)
	cp := filepath.Join(dir, spoollog.CheckpointFile)
	modify(t, cp, func(b []byte) []byte {
		return []byte(strings.Replace(string(b), "log-start-offset 0", "log-start-offset 9", 1))
	})
	code, out, _ := runTool(t, "check", dir)
	require.Equal(t, exitOK, code, out)
	require.Contains(t, out, fmt.Sprintf("warning: %s: log: checkpoint file is damaged: crc32c", cp))

	require.NoError(t, os.Remove(cp))
	code, out, _ = runTool(t, "check", dir)
	require.Equal(t, exitOK, code, out)
	require.Contains(t, out, fmt.Sprintf("info: %s: no checkpoint", cp))
}

func TestCheckUsageErrors(t *testing.T) {
	dir := t.TempDir()
	logs := makeLog(t, dir, 30)
	for _, args := range [][]string{
		{"check"},
		{"check", dir, dir},
		{"check", "--no-such-flag", dir},
		{"check", filepath.Join(dir, "does-not-exist")},
		{"check", logs[0]},
	} {
		code, stdout, stderr := runTool(t, args...)
		require.Equal(t, exitUsage, code, "%v", args)
		require.Empty(t, stdout, "%v", args)
		require.NotEmpty(t, stderr, "%v", args)
	}
}

// TestCheckEmptyDir: an empty directory is not a data directory, and
// "clean" would only say that nothing was checked.
func TestCheckEmptyDir(t *testing.T) {
	code, out, stderr := runTool(t, "check", t.TempDir())
	require.Equal(t, exitUsage, code)
	require.Empty(t, out)
	require.Contains(t, stderr, "is not a spool data directory")
}

// snapshot records every file under dir: name, mode, size, time, content.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		sum := ""
		if d.Type().IsRegular() {
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sum = fmt.Sprintf("%x", sha256.Sum256(data))
		}
		files[path] = fmt.Sprintf("%v %d %v %s", info.Mode(), info.Size(), info.ModTime().UnixNano(), sum)
		return nil
	})
	require.NoError(t, err)
	return files
}

func TestCheckAndDumpModifyNothing(t *testing.T) {
	dir := t.TempDir()
	logs := makeLog(t, dir, 40)
	appendTo(t, logs[len(logs)-1], []byte("torn"))
	modify(t, logs[0], func(b []byte) []byte { b[200] ^= 1; return b })
	require.NoError(t, os.Remove(sibling(logs[1], segment.IndexSuffix)))
	before := snapshot(t, dir)

	code, _, _ := runTool(t, "check", dir)
	require.Equal(t, exitProblem, code)
	args := []string{"dump", "--records", "--verify-index"}
	for _, p := range logs {
		args = append(args, p, sibling(p, segment.IndexSuffix), sibling(p, segment.TimeIndexSuffix))
	}
	runTool(t, append(args, filepath.Join(dir, spoollog.CheckpointFile))...)

	require.Equal(t, before, snapshot(t, dir))
}

// A process killed after it reopened a cleanly closed, empty partition
// and before its first append leaves the clean-shutdown checkpoint, an
// empty .log and its indexes (seen in CI's produce crash loop, round 0,
// when indexes were preallocated whole and zero-filled: a zero "first
// entry" there is unwritten space, not an entry); check must not call the
// partition damaged.
func TestCheckCrashBeforeFirstAppend(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, openTestLog(t, dir).Close()) // created, closed cleanly
	l := openTestLog(t, dir)                        // reopened
	defer l.Close()
	crashed := t.TempDir()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(crashed, e.Name()), data, 0o644))
	}
	code, out, _ := runTool(t, "check", crashed)
	require.Equal(t, exitOK, code, out)
	require.Empty(t, problemLines(out, "error"), out)
	require.NotContains(t, out, "disagrees with the log", out)
	// The same with the indexes zero-filled, as a new segment's first
	// growth step (or an older version's whole preallocation) leaves them.
	for _, e := range entries {
		if size := map[string]int{segment.IndexSuffix: 4096, segment.TimeIndexSuffix: 4092}[filepath.Ext(e.Name())]; size > 0 {
			require.NoError(t, os.WriteFile(filepath.Join(crashed, e.Name()), make([]byte, size), 0o644))
		}
	}
	code, out, _ = runTool(t, "check", crashed)
	require.Equal(t, exitOK, code, out)
	require.Empty(t, problemLines(out, "error"), out)
	require.NotContains(t, out, "disagrees with the log", out)
	require.Contains(t, out, "not trimmed", out)
}

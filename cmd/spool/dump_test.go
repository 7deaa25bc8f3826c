package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/spoolmq/spool/controller"
	spoollog "github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/partition"
	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/segment"
)

// linesWithPrefix counts the output lines that start with prefix.
func linesWithPrefix(out, prefix string) int {
	n := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

func TestDumpLog(t *testing.T) {
	dir := t.TempDir()
	logs := makeLog(t, dir, 30)
	path := logs[1]
	positions, counts := batchPositions(t, path)
	records := 0
	for _, c := range counts {
		records += c
	}

	code, out, stderr := runTool(t, "dump", path)
	require.Equal(t, exitOK, code, out+stderr)
	require.Equal(t, len(positions), linesWithPrefix(out, "position: "), out)
	require.Zero(t, linesWithPrefix(out, "| offset: "))
	require.NotContains(t, out, "PROBLEM")
	require.Contains(t, out, fmt.Sprintf("%d batches\n", len(positions)))
	for _, pos := range positions {
		require.Contains(t, out, fmt.Sprintf("position: %d baseOffset: ", pos))
	}
	// The first batch of the second segment, field by field.
	base, _, _ := segment.ParseFileName(filepath.Base(path))
	first := fmt.Sprintf("position: 0 baseOffset: %d lastOffset: %d count: 3 size: ", base, base+2)
	require.Contains(t, out, first)
	require.Contains(t, out, fmt.Sprintf("crcValid: true codec: none firstTimestamp: %d maxTimestamp: %d producerId: -1 producerEpoch: -1 baseSequence: -1 partitionLeaderEpoch: -1\n",
		testEpoch.UnixMilli()+base, testEpoch.UnixMilli()+base+2))

	code, out, _ = runTool(t, "dump", "--records", path)
	require.Equal(t, exitOK, code, out)
	require.Equal(t, len(positions), linesWithPrefix(out, "position: "))
	require.Equal(t, records, linesWithPrefix(out, "| offset: "), out)
	require.Contains(t, out, fmt.Sprintf("%d batches, %d records\n", len(positions), records))
	k := base + 1
	require.Contains(t, out, fmt.Sprintf("| offset: %d timestamp: %d key: \"key-%d\" valueSize: %d value: \"value-%d-xxx", k, testEpoch.UnixMilli()+k, k, len(fmt.Sprintf("value-%d-", k))+100, k))
	require.Contains(t, out, "...(")       // long values are cut
	require.Contains(t, out, "headers: 1") // every fifth record has one
}

func TestDumpEmptyGarbageAndTruncatedFiles(t *testing.T) {
	dir := t.TempDir()
	logs := makeLog(t, dir, 30)
	positions, _ := batchPositions(t, logs[0])
	valid, err := os.ReadFile(logs[0])
	require.NoError(t, err)

	tmp := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(tmp, name)
		require.NoError(t, os.WriteFile(p, data, 0o644))
		return p
	}

	empty := write("00000000000000000000.log", nil)
	code, out, _ := runTool(t, "dump", empty)
	require.Equal(t, exitOK, code, out)
	require.Contains(t, out, "0 batches")

	garbage := write("garbage.log", bytes.Repeat([]byte("not a batch "), 20))
	code, out, _ = runTool(t, "dump", "--records", garbage)
	require.Equal(t, exitProblem, code, out)
	require.Contains(t, out, fmt.Sprintf("PROBLEM: %s: position 0: cannot frame a batch", garbage))
	require.Contains(t, out, "0 batches")

	cut := positions[2] + 30 // inside the third batch
	truncated := write("00000000000000000001.log", valid[:cut])
	code, out, _ = runTool(t, "dump", "--records", truncated)
	require.Equal(t, exitProblem, code, out)
	require.Equal(t, 2, linesWithPrefix(out, "position: "), out)
	require.Contains(t, out, fmt.Sprintf("PROBLEM: %s: position %d: cannot frame a batch: record: truncated batch", truncated, positions[2]))
	require.Contains(t, out, "no valid batch follows")

	tiny := write("00000000000000000002.log", valid[:5])
	code, out, _ = runTool(t, "dump", tiny)
	require.Equal(t, exitProblem, code, out)
	require.Contains(t, out, fmt.Sprintf("%s: position 0: cannot frame a batch", tiny))

	// A flipped bit is reported, and dumping goes on past it.
	flipped := bytes.Clone(valid)
	flipped[positions[1]+90] ^= 0x80
	bad := write("00000000000000000003.log", flipped)
	code, out, _ = runTool(t, "dump", "--records", bad)
	require.Equal(t, exitProblem, code, out)
	require.Equal(t, len(positions), linesWithPrefix(out, "position: "))
	require.Contains(t, out, fmt.Sprintf("position: %d baseOffset: 3 lastOffset: 5 count: 3 size: %d crcValid: false", positions[1], positions[2]-positions[1]))
	require.Contains(t, out, fmt.Sprintf("PROBLEM: %s: position %d: batch at offset 3: record: corrupt batch: crc32c", bad, positions[1]))
	require.Contains(t, out, "records not decoded")

	// Missing and unknown files are problems; the other files still get
	// dumped.
	code, out, _ = runTool(t, "dump", filepath.Join(tmp, "missing.log"), write("notes.txt", []byte("hi")), empty)
	require.Equal(t, exitProblem, code, out)
	require.Equal(t, 2, linesWithPrefix(out, "PROBLEM: "), out)
	require.Contains(t, out, "0 batches")
}

func TestDumpNeverPanics(t *testing.T) {
	// Random bytes, and valid logs with random damage, in every role a
	// file can have.
	dir := t.TempDir()
	logs := makeLog(t, dir, 20)
	valid, err := os.ReadFile(logs[0])
	require.NoError(t, err)
	idx, err := os.ReadFile(sibling(logs[0], segment.IndexSuffix))
	require.NoError(t, err)

	rng := rand.New(rand.NewPCG(1, 2))
	tmp := t.TempDir()
	for i := range 200 {
		var data []byte
		switch i % 3 {
		case 0:
			data = make([]byte, rng.IntN(300))
			for j := range data {
				data[j] = byte(rng.UintN(256))
			}
		case 1:
			data = bytes.Clone(valid[:rng.IntN(len(valid)+1)])
		default:
			data = bytes.Clone(valid)
			for range 1 + rng.IntN(4) {
				data[rng.IntN(len(data))] = byte(rng.UintN(256))
			}
		}
		logPath := filepath.Join(tmp, segment.FileName(0, segment.LogSuffix))
		require.NoError(t, os.WriteFile(logPath, data, 0o644))
		ix := bytes.Clone(idx[:rng.IntN(len(idx)+1)])
		if len(ix) > 0 && i%2 == 0 {
			ix[rng.IntN(len(ix))] ^= byte(1 + rng.UintN(255))
		}
		require.NoError(t, os.WriteFile(sibling(logPath, segment.IndexSuffix), ix, 0o644))
		require.NoError(t, os.WriteFile(sibling(logPath, segment.TimeIndexSuffix), data[:min(len(data), 36)], 0o644))

		code, out, _ := runTool(t, "dump", "--records", "--verify-index", logPath)
		require.Contains(t, []int{exitOK, exitProblem}, code, out)
		code, out, _ = runTool(t, "check", tmp)
		require.Contains(t, []int{exitOK, exitProblem}, code, out)
	}
}

func TestDumpIndexes(t *testing.T) {
	dir := t.TempDir()
	logs := makeLog(t, dir, 30)
	offPath := sibling(logs[1], segment.IndexSuffix)
	timPath := sibling(logs[1], segment.TimeIndexSuffix)
	offData, err := os.ReadFile(offPath)
	require.NoError(t, err)
	timData, err := os.ReadFile(timPath)
	require.NoError(t, err)
	nOff, nTim := len(offData)/8, len(timData)/12
	require.Greater(t, nOff, 2)

	code, out, _ := runTool(t, "dump", offPath, timPath)
	require.Equal(t, exitOK, code, out)
	require.Equal(t, nOff, linesWithPrefix(out, "offset: "), out)
	require.Equal(t, nTim, linesWithPrefix(out, "timestamp: "), out)
	require.NotContains(t, out, "MISMATCH")
	require.Contains(t, out, fmt.Sprintf("%d entries checked against %s: 0 mismatched, 0 not checked", nOff, filepath.Base(logs[1])))
	// Entries as written: big-endian relative offset and position.
	base, _, _ := segment.ParseFileName(filepath.Base(offPath))
	require.Contains(t, out, fmt.Sprintf("offset: %d position: %d\n",
		base+int64(binary.BigEndian.Uint32(offData[8:])), binary.BigEndian.Uint32(offData[12:])))

	// --verify-index prints only what is wrong.
	code, out, _ = runTool(t, "dump", "--verify-index", offPath, timPath)
	require.Equal(t, exitOK, code, out)
	require.Zero(t, linesWithPrefix(out, "offset: "), out)
	require.Zero(t, linesWithPrefix(out, "timestamp: "), out)

	// One entry pointing a byte past its batch.
	binary.BigEndian.PutUint32(offData[12:], binary.BigEndian.Uint32(offData[12:])+1)
	require.NoError(t, os.WriteFile(offPath, offData, 0o644))
	for _, args := range [][]string{{"dump", offPath}, {"dump", "--verify-index", offPath}, {"dump", "--verify-index", logs[1]}} {
		code, out, _ = runTool(t, args...)
		require.Equal(t, exitProblem, code, out)
		require.Equal(t, 1, strings.Count(out, "MISMATCH"), out)
		require.Contains(t, out, "is inside a batch, not at its start")
		require.Contains(t, out, "1 mismatched")
	}
}

func TestDumpMalformedIndexes(t *testing.T) {
	dir := t.TempDir()
	logs := makeLog(t, dir, 30)
	for _, tc := range []struct {
		suffix string
		data   []byte
	}{
		{segment.IndexSuffix, []byte{1, 2, 3, 4, 5}},                                            // not whole entries
		{segment.IndexSuffix, []byte{0, 0, 0, 9, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 2, 0}},           // offsets decrease
		{segment.TimeIndexSuffix, bytes.Repeat([]byte{0xff}, 13)},                               // not whole entries
		{segment.TimeIndexSuffix, append(make([]byte, 12), 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 0, 0)}, // zero timestamp first
	} {
		path := sibling(logs[0], tc.suffix)
		require.NoError(t, os.WriteFile(path, tc.data, 0o644))
		code, out, _ := runTool(t, "dump", path)
		require.Equal(t, exitProblem, code, out)
		require.Contains(t, out, "PROBLEM: ")
		require.Contains(t, out, "index: corrupt")
		require.Contains(t, out, path)
	}

	// An empty index is fine.
	path := sibling(logs[0], segment.IndexSuffix)
	require.NoError(t, os.WriteFile(path, nil, 0o644))
	code, out, _ := runTool(t, "dump", path)
	require.Equal(t, exitOK, code, out)
	require.Contains(t, out, "0 entries")
}

func TestDumpIndexWithoutLog(t *testing.T) {
	dir := t.TempDir()
	logs := makeLog(t, dir, 30)
	path := sibling(logs[0], segment.IndexSuffix)
	require.NoError(t, os.Remove(logs[0]))
	code, out, _ := runTool(t, "dump", path)
	require.Equal(t, exitOK, code, out)
	require.Contains(t, out, "not all entries checked")
	require.Contains(t, out, "not checked")
}

func TestDumpCheckpoint(t *testing.T) {
	dir := t.TempDir()
	makeLog(t, dir, 30)
	path := filepath.Join(dir, spoollog.CheckpointFile)
	code, out, _ := runTool(t, "dump", path)
	require.Equal(t, exitOK, code, out)
	require.Contains(t, out, "recoveryPoint: 90 ")
	require.Contains(t, out, "cleanShutdown: true")

	modify(t, path, func(b []byte) []byte { return b[:len(b)-3] })
	code, out, _ = runTool(t, "dump", path)
	require.Equal(t, exitProblem, code, out)
	require.Contains(t, out, "checkpoint file is damaged")
}

func TestDumpUsage(t *testing.T) {
	code, stdout, stderr := runTool(t, "dump")
	require.Equal(t, exitUsage, code)
	require.Empty(t, stdout)
	require.Contains(t, stderr, "Usage: spool dump")

	code, _, stderr = runTool(t, "dump", "--frobnicate", "x.log")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "frobnicate")
}

func TestShowBytes(t *testing.T) {
	require.Equal(t, "null", showBytes(nil))
	require.Equal(t, `""`, showBytes([]byte{}))
	require.Equal(t, `"a\x00\"b"`, showBytes([]byte("a\x00\"b")))
	long := bytes.Repeat([]byte("z"), 100)
	require.Equal(t, `"`+strings.Repeat("z", maxShownBytes)+`"...(100 bytes)`, showBytes(long))
}

func TestBatchLineFlags(t *testing.T) {
	b, err := record.NewBatch([]record.Record{{Value: []byte("v")}}, record.BatchOptions{
		Compression:   record.Gzip,
		Producer:      &record.ProducerInfo{ID: 7, Epoch: 2, BaseSequence: 40},
		Transactional: true,
	})
	require.NoError(t, err)
	b.SetBaseOffset(100)
	b.SetPartitionLeaderEpoch(5)
	line := batchLine(b, 4096)
	require.Contains(t, line, "position: 4096 baseOffset: 100 lastOffset: 100 count: 1 size: ")
	require.Contains(t, line, "crcValid: true codec: gzip ")
	require.Contains(t, line, "producerId: 7 producerEpoch: 2 baseSequence: 40 partitionLeaderEpoch: 5")
	require.Contains(t, line, "isTransactional: true")
}

func TestDumpVerifyIndexOfLogWithoutIndexes(t *testing.T) {
	// The log rebuilds missing indexes: looking for them beside a .log
	// and not finding them is no problem; naming one that is not there
	// is.
	dir := t.TempDir()
	logs := makeLog(t, dir, 30)
	for _, s := range []string{segment.IndexSuffix, segment.TimeIndexSuffix} {
		require.NoError(t, os.Remove(sibling(logs[0], s)))
	}
	code, out, _ := runTool(t, "dump", "--verify-index", logs[0])
	require.Equal(t, exitOK, code, out)
	require.Contains(t, out, "No "+sibling(logs[0], segment.IndexSuffix))

	code, out, _ = runTool(t, "dump", sibling(logs[0], segment.IndexSuffix))
	require.Equal(t, exitProblem, code, out)
	require.Contains(t, out, "no such file")
}

// A log's directory dumps as its checkpoint and its segments in offset
// order: here the Raft log of the cluster metadata, whose log start offset
// and first segment are not 0 (its head was deleted after a snapshot, then
// it was emptied and restarted past another). A directory with no log in it
// is a problem.
func TestDumpDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "__cluster_metadata-0")
	s, err := controller.OpenLogStore(dir, controller.LogStoreOptions{SegmentBytes: 2048})
	require.NoError(t, err)
	entries := func(from, to, term uint64) []*raft.Log {
		var out []*raft.Log
		for i := from; i <= to; i++ {
			out = append(out, &raft.Log{Index: i, Term: term, Data: []byte(fmt.Sprintf("command %d", i)), AppendedAt: testEpoch})
		}
		return out
	}
	require.NoError(t, s.StoreLogs(entries(1, 40, 1)))
	require.NoError(t, s.DeleteRange(1, 40))
	require.NoError(t, s.StoreLogs(entries(500, 520, 2)))
	require.NoError(t, s.StoreLogs(entries(521, 600, 3)))
	require.NoError(t, s.DeleteRange(500, 505))
	require.NoError(t, s.Close())
	logs := segmentLogs(t, dir)
	require.Greater(t, len(logs), 1)

	code, out, stderr := runTool(t, "dump", "--records", dir)
	require.Equal(t, exitOK, code, out+stderr)
	require.NotContains(t, out, "PROBLEM")
	require.Equal(t, 1+len(logs), linesWithPrefix(out, "Dumping "), out)
	require.True(t, strings.HasPrefix(out, "Dumping "+filepath.Join(dir, spoollog.CheckpointFile)), out)
	require.Contains(t, out, "logStartOffset: 505")
	require.Contains(t, out, "position: 0 baseOffset: 499 lastOffset: 519 count: 21 ")
	require.Contains(t, out, "partitionLeaderEpoch: 2\n")
	require.Contains(t, out, "partitionLeaderEpoch: 3\n")
	require.Contains(t, out, `| offset: 599 timestamp: `+fmt.Sprint(testEpoch.UnixMilli())+` key: "\x00" valueSize: 11 value: "command 600" headers: 0`)
	require.Less(t, strings.Index(out, logs[0]), strings.Index(out, logs[1]), "segments in offset order")

	code, out, _ = runTool(t, "dump", t.TempDir())
	require.Equal(t, exitProblem, code)
	require.Contains(t, out, "PROBLEM: ")
	require.Contains(t, out, "a directory with no checkpoint and no segment files")
}

// TestDumpTransactions: markers show as such in a .log's dump, and a
// .txnindex dumps its aborted transactions; a torn one is a problem.
func TestDumpTransactions(t *testing.T) {
	dir := t.TempDir()
	p, err := partition.Open(dir, "t", 0, partition.Options{Log: spoollog.Options{Flush: spoollog.None}})
	require.NoError(t, err)
	b, err := record.NewBatch([]record.Record{{Value: []byte("x")}}, record.BatchOptions{
		Producer: &record.ProducerInfo{ID: 7, Epoch: 2, BaseSequence: 0}, Transactional: true})
	require.NoError(t, err)
	_, _, err = p.AppendProduced(b)
	require.NoError(t, err)
	m, err := partition.MarkerBatch(7, 2, false, 4)
	require.NoError(t, err)
	_, _, err = p.AppendProduced(m)
	require.NoError(t, err)
	require.NoError(t, p.Close())

	code, out, stderr := runTool(t, "dump", filepath.Join(dir, segment.FileName(0, segment.LogSuffix)))
	require.Equal(t, exitOK, code, out+stderr)
	require.Contains(t, out, "isTransactional: true isControl: true endTxnMarker: ABORT coordinatorEpoch: 4\n")

	idx := filepath.Join(dir, segment.FileName(0, segment.TxnIndexSuffix))
	code, out, stderr = runTool(t, "dump", idx)
	require.Equal(t, exitOK, code, out+stderr)
	require.Contains(t, out, "producerId: 7 firstOffset: 0 lastOffset: 1 lastStableOffset: 2\n")
	require.Contains(t, out, "1 aborted transactions\n")

	require.NoError(t, os.Truncate(idx, segment.TxnIndexEntrySize+5))
	code, out, _ = runTool(t, "dump", idx)
	require.Equal(t, exitProblem, code, out)
	require.Contains(t, out, "PROBLEM")
	require.Contains(t, out, "producerId: 7 firstOffset: 0", "the entries before the damage are shown")
}

package log

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spoolmq/spool/internal/vfs"
)

// CheckpointFile is the name of the file in a log's directory that records
// what a restart needs to know: the recovery point, the log start offset and
// whether the log was closed cleanly. It is replaced atomically (write a
// temporary file, fsync, rename, fsync the directory) and carries its own
// CRC, so a torn or damaged checkpoint is detected and treated as "recover
// everything" rather than trusted.
//
//	spool-log-checkpoint 2
//	recovery-point 368769 368000 1048576
//	log-start-offset 0
//	clean-shutdown false
//	cleaner-offset 250000
//	crc32c 5e3a9b1c
//
// recovery-point gives the offset before which every batch and index entry
// is known to be on stable storage, with the segment (base offset) and byte
// position where that offset lies: an unclean restart checks batches from
// there on and nothing before. cleaner-offset is where compaction's dirty
// part of the log begins (version 1 files, without it, read as 0).
const CheckpointFile = "checkpoint"

const (
	checkpointMagicV1 = "spool-log-checkpoint 1"
	checkpointMagic   = "spool-log-checkpoint 2"
)

// RecoveryPoint locates the first byte that may not be durable.
type RecoveryPoint struct {
	Offset      int64 // offsets below are durable
	SegmentBase int64 // the segment that holds Offset (or would)
	Position    int64 // byte position of Offset's batch in that segment
}

// Checkpoint is what a log's checkpoint file records.
type Checkpoint struct {
	RecoveryPoint RecoveryPoint
	StartOffset   int64 // the log start offset
	CleanShutdown bool  // the log was closed cleanly and has not been opened since
	CleanerOffset int64 // offsets below have been compacted
}

// ErrBadCheckpoint means the checkpoint file is damaged (its CRC or layout
// is wrong). Open then checks every segment rather than trust it.
var ErrBadCheckpoint = errors.New("log: checkpoint file is damaged")

func (c Checkpoint) encode() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\nrecovery-point %d %d %d\nlog-start-offset %d\nclean-shutdown %t\ncleaner-offset %d\n",
		checkpointMagic, c.RecoveryPoint.Offset, c.RecoveryPoint.SegmentBase, c.RecoveryPoint.Position, c.StartOffset, c.CleanShutdown, c.CleanerOffset)
	fmt.Fprintf(&b, "crc32c %08x\n", crc32.Checksum(b.Bytes(), castagnoli))
	return b.Bytes()
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ParseCheckpoint decodes the contents of a checkpoint file, checking its
// CRC and layout; any deviation is ErrBadCheckpoint.
func ParseCheckpoint(data []byte) (Checkpoint, error) {
	var c Checkpoint
	i := bytes.LastIndex(data, []byte("crc32c "))
	if i < 0 {
		return c, fmt.Errorf("%w: no crc", ErrBadCheckpoint)
	}
	want, err := strconv.ParseUint(strings.TrimSpace(string(data[i+7:])), 16, 32)
	if err != nil || uint32(want) != crc32.Checksum(data[:i], castagnoli) {
		return c, fmt.Errorf("%w: crc32c mismatch", ErrBadCheckpoint)
	}
	lines := strings.Split(strings.TrimSpace(string(data[:i])), "\n")
	switch {
	case len(lines) == 4 && lines[0] == checkpointMagicV1:
	case len(lines) == 5 && lines[0] == checkpointMagic:
		if _, err := fmt.Sscanf(lines[4], "cleaner-offset %d", &c.CleanerOffset); err != nil || c.CleanerOffset < 0 {
			return c, fmt.Errorf("%w: cleaner-offset: %v", ErrBadCheckpoint, err)
		}
	default:
		return c, fmt.Errorf("%w: unexpected layout", ErrBadCheckpoint)
	}
	var clean string
	if _, err := fmt.Sscanf(lines[1], "recovery-point %d %d %d", &c.RecoveryPoint.Offset, &c.RecoveryPoint.SegmentBase, &c.RecoveryPoint.Position); err != nil {
		return c, fmt.Errorf("%w: %v", ErrBadCheckpoint, err)
	}
	if _, err := fmt.Sscanf(lines[2], "log-start-offset %d", &c.StartOffset); err != nil {
		return c, fmt.Errorf("%w: %v", ErrBadCheckpoint, err)
	}
	if _, err := fmt.Sscanf(lines[3], "clean-shutdown %s", &clean); err != nil || (clean != "true" && clean != "false") {
		return c, fmt.Errorf("%w: clean-shutdown %q", ErrBadCheckpoint, clean)
	}
	c.CleanShutdown = clean == "true"
	if c.RecoveryPoint.Offset < 0 || c.RecoveryPoint.SegmentBase < 0 || c.RecoveryPoint.Position < 0 || c.StartOffset < 0 {
		return c, fmt.Errorf("%w: negative field", ErrBadCheckpoint)
	}
	return c, nil
}

// ReadCheckpoint reads the checkpoint file of the log in dir, without
// opening the log (tools use it). A missing file is reported with
// os.ErrNotExist, a damaged one with ErrBadCheckpoint.
func ReadCheckpoint(dir string) (Checkpoint, error) {
	return readCheckpoint(vfs.Default, dir)
}

func readCheckpoint(fsys vfs.FS, dir string) (Checkpoint, error) {
	data, err := vfs.ReadFile(fsys, filepath.Join(dir, CheckpointFile))
	if err != nil {
		return Checkpoint{}, err
	}
	return ParseCheckpoint(data)
}

// String describes the checkpoint on one line.
func (c Checkpoint) String() string {
	return fmt.Sprintf("recovery point offset %d (segment %d, position %d), log start offset %d, clean shutdown %t, cleaner offset %d",
		c.RecoveryPoint.Offset, c.RecoveryPoint.SegmentBase, c.RecoveryPoint.Position, c.StartOffset, c.CleanShutdown, c.CleanerOffset)
}

func writeCheckpoint(fsys vfs.FS, dir string, c Checkpoint) error {
	if err := vfs.WriteFileAtomic(fsys, filepath.Join(dir, CheckpointFile), c.encode()); err != nil {
		return fmt.Errorf("log: write checkpoint: %w", err)
	}
	return nil
}

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
//	spool-log-checkpoint 1
//	recovery-point 368769 368000 1048576
//	log-start-offset 0
//	clean-shutdown false
//	crc32c 5e3a9b1c
//
// recovery-point gives the offset before which every batch and index entry
// is known to be on stable storage, with the segment (base offset) and byte
// position where that offset lies: an unclean restart checks batches from
// there on and nothing before.
const CheckpointFile = "checkpoint"

const checkpointMagic = "spool-log-checkpoint 1"

// recoveryPoint locates the first byte that may not be durable.
type recoveryPoint struct {
	Offset      int64 // offsets below are durable
	SegmentBase int64 // the segment that holds Offset (or would)
	Position    int64 // byte position of Offset's batch in that segment
}

type checkpoint struct {
	Recovery recoveryPoint
	Start    int64 // log start offset
	Clean    bool
}

var errBadCheckpoint = errors.New("log: checkpoint file is damaged")

func (c checkpoint) encode() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\nrecovery-point %d %d %d\nlog-start-offset %d\nclean-shutdown %t\n",
		checkpointMagic, c.Recovery.Offset, c.Recovery.SegmentBase, c.Recovery.Position, c.Start, c.Clean)
	fmt.Fprintf(&b, "crc32c %08x\n", crc32.Checksum(b.Bytes(), castagnoli))
	return b.Bytes()
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func decodeCheckpoint(data []byte) (checkpoint, error) {
	var c checkpoint
	i := bytes.LastIndex(data, []byte("crc32c "))
	if i < 0 {
		return c, fmt.Errorf("%w: no crc", errBadCheckpoint)
	}
	want, err := strconv.ParseUint(strings.TrimSpace(string(data[i+7:])), 16, 32)
	if err != nil || uint32(want) != crc32.Checksum(data[:i], castagnoli) {
		return c, fmt.Errorf("%w: crc mismatch", errBadCheckpoint)
	}
	lines := strings.Split(strings.TrimSpace(string(data[:i])), "\n")
	if len(lines) != 4 || lines[0] != checkpointMagic {
		return c, fmt.Errorf("%w: unexpected layout", errBadCheckpoint)
	}
	var clean string
	if _, err := fmt.Sscanf(lines[1], "recovery-point %d %d %d", &c.Recovery.Offset, &c.Recovery.SegmentBase, &c.Recovery.Position); err != nil {
		return c, fmt.Errorf("%w: %v", errBadCheckpoint, err)
	}
	if _, err := fmt.Sscanf(lines[2], "log-start-offset %d", &c.Start); err != nil {
		return c, fmt.Errorf("%w: %v", errBadCheckpoint, err)
	}
	if _, err := fmt.Sscanf(lines[3], "clean-shutdown %s", &clean); err != nil || (clean != "true" && clean != "false") {
		return c, fmt.Errorf("%w: clean-shutdown %q", errBadCheckpoint, clean)
	}
	c.Clean = clean == "true"
	if c.Recovery.Offset < 0 || c.Recovery.SegmentBase < 0 || c.Recovery.Position < 0 || c.Start < 0 {
		return c, fmt.Errorf("%w: negative field", errBadCheckpoint)
	}
	return c, nil
}

// readCheckpoint reads the checkpoint; a missing file is reported with
// os.ErrNotExist, a damaged one with errBadCheckpoint.
func readCheckpoint(fsys vfs.FS, dir string) (checkpoint, error) {
	data, err := vfs.ReadFile(fsys, filepath.Join(dir, CheckpointFile))
	if err != nil {
		return checkpoint{}, err
	}
	return decodeCheckpoint(data)
}

func writeCheckpoint(fsys vfs.FS, dir string, c checkpoint) error {
	if err := vfs.WriteFileAtomic(fsys, filepath.Join(dir, CheckpointFile), c.encode()); err != nil {
		return fmt.Errorf("log: write checkpoint: %w", err)
	}
	return nil
}

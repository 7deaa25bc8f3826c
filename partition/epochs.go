package partition

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/spoolmq/spool/internal/vfs"
)

// EpochFile is the name of the leader-epoch cache in a partition directory.
const EpochFile = "leader-epoch-checkpoint"

// ErrBadEpochFile means the leader-epoch checkpoint does not parse or its
// entries are out of order.
var ErrBadEpochFile = errors.New("partition: leader-epoch checkpoint is damaged")

// ErrNewerLeaderEpoch means a partition's log holds a leader epoch newer
// than the one it is opened to lead in: records a later leader wrote, which
// this broker must not write under an older epoch.
var ErrNewerLeaderEpoch = errors.New("partition: the log holds a newer leader epoch")

// VerifyEpochs applies Open's rule for a partition that is not replicated
// and leads at leaderEpoch (a standalone broker's 0): the entries that
// start below the log end offset (the ones Open keeps) may not name a
// newer epoch. The error wraps ErrNewerLeaderEpoch.
func VerifyEpochs(entries []EpochEntry, logEnd int64, leaderEpoch int32) error {
	for i := len(entries) - 1; i >= 0; i-- {
		if e := entries[i]; e.StartOffset < logEnd {
			if e.Epoch > leaderEpoch {
				return fmt.Errorf("%w: epoch %d from offset %d, newer than this broker's %d", ErrNewerLeaderEpoch, e.Epoch, e.StartOffset, leaderEpoch)
			}
			return nil
		}
	}
	return nil
}

// EpochEntry says that leader epoch Epoch began at offset StartOffset.
type EpochEntry struct {
	Epoch       int32
	StartOffset int64
}

// EpochCache is the leader-epoch cache: for each leader epoch, the first
// offset written in it, in increasing order of both. Every change is written
// to the checkpoint file atomically before the call returns. Safe for
// concurrent use.
type EpochCache struct {
	mu      sync.Mutex
	fs      vfs.FS
	path    string
	entries []EpochEntry
}

// OpenEpochCache reads the cache of the partition in dir. A missing file is
// an empty cache; a damaged one is an error wrapping ErrBadEpochFile (the
// caller rebuilds the cache from the log's batch headers).
func OpenEpochCache(fsys vfs.FS, dir string) (*EpochCache, error) {
	c := newEpochCache(fsys, dir)
	data, err := vfs.ReadFile(c.fs, c.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return c, nil
	case err != nil:
		return nil, err
	}
	entries, err := parseEpochs(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadEpochFile, c.path, err)
	}
	c.entries = entries
	return c, nil
}

func newEpochCache(fsys vfs.FS, dir string) *EpochCache {
	if fsys == nil {
		fsys = vfs.Default
	}
	return &EpochCache{fs: fsys, path: filepath.Join(dir, EpochFile)}
}

// parseEpochs reads Kafka's checkpoint text format: a version line (0), a
// count line, then count lines of "epoch startOffset".
func parseEpochs(data []byte) ([]EpochEntry, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	line := func() (string, bool) {
		if !sc.Scan() {
			return "", false
		}
		return strings.TrimSpace(sc.Text()), true
	}
	v, ok := line()
	if !ok || v != "0" {
		return nil, fmt.Errorf("version %q, want 0", v)
	}
	n, ok := line()
	count, err := strconv.Atoi(n)
	if !ok || err != nil || count < 0 || count > 1<<20 {
		return nil, fmt.Errorf("count %q", n)
	}
	entries := make([]EpochEntry, 0, count)
	for i := 0; i < count; i++ {
		l, ok := line()
		if !ok {
			return nil, fmt.Errorf("%d entries, expected %d", i, count)
		}
		var e EpochEntry
		if _, err := fmt.Sscanf(l, "%d %d", &e.Epoch, &e.StartOffset); err != nil {
			return nil, fmt.Errorf("entry %d %q: %v", i, l, err)
		}
		if e.Epoch < 0 || e.StartOffset < 0 {
			return nil, fmt.Errorf("entry %d %q: negative", i, l)
		}
		if i > 0 && (e.Epoch <= entries[i-1].Epoch || e.StartOffset < entries[i-1].StartOffset) {
			return nil, fmt.Errorf("entry %d %q out of order", i, l)
		}
		entries = append(entries, e)
	}
	if l, ok := line(); ok && l != "" {
		return nil, fmt.Errorf("trailing line %q", l)
	}
	return entries, nil
}

func (c *EpochCache) writeLocked() error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "0\n%d\n", len(c.entries))
	for _, e := range c.entries {
		fmt.Fprintf(&b, "%d %d\n", e.Epoch, e.StartOffset)
	}
	if err := vfs.WriteFileAtomic(c.fs, c.path, b.Bytes()); err != nil {
		return fmt.Errorf("partition: write %s: %w", c.path, err)
	}
	return nil
}

// Entries returns a copy of the entries.
func (c *EpochCache) Entries() []EpochEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]EpochEntry(nil), c.entries...)
}

// Latest returns the latest epoch, or -1 when the cache is empty.
func (c *EpochCache) Latest() int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) == 0 {
		return -1
	}
	return c.entries[len(c.entries)-1].Epoch
}

// Assign records that epoch begins at startOffset. An epoch not above the
// latest is ignored (it is already known). Entries of earlier epochs that
// start at or after startOffset are dropped: they held no records.
func (c *EpochCache) Assign(epoch int32, startOffset int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.assignLocked(epoch, startOffset) {
		return nil
	}
	return c.writeLocked()
}

// assignLocked is Assign in memory; it reports whether the entries changed.
func (c *EpochCache) assignLocked(epoch int32, startOffset int64) bool {
	if n := len(c.entries); n > 0 && epoch <= c.entries[n-1].Epoch {
		return false
	}
	for len(c.entries) > 0 && c.entries[len(c.entries)-1].StartOffset >= startOffset {
		c.entries = c.entries[:len(c.entries)-1]
	}
	c.entries = append(c.entries, EpochEntry{Epoch: epoch, StartOffset: startOffset})
	return true
}

// EndOffsetFor answers Kafka's OffsetsForLeaderEpoch as KIP-279 has it: the
// largest epoch the cache knows that is <= epoch, and the offset where it
// ended (the start of the next epoch, or logEnd for the latest). For an
// epoch older than every entry it returns that epoch and the first entry's
// start offset, as Kafka does since its PR #5678: the older records are gone
// from the log, and a follower must copy from there. An empty cache returns
// -1, -1.
func (c *EpochCache) EndOffsetFor(epoch int32, logEnd int64) (int32, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(c.entries) - 1; i >= 0; i-- {
		if c.entries[i].Epoch <= epoch {
			if i == len(c.entries)-1 {
				return c.entries[i].Epoch, logEnd
			}
			return c.entries[i].Epoch, c.entries[i+1].StartOffset
		}
	}
	if len(c.entries) > 0 {
		return epoch, c.entries[0].StartOffset
	}
	return -1, -1
}

// TruncateFromEnd drops the entries that start at or after endOffset, as
// the log is truncated there.
func (c *EpochCache) TruncateFromEnd(endOffset int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.truncateFromEndLocked(endOffset) {
		return nil
	}
	return c.writeLocked()
}

// truncateFromEndLocked is TruncateFromEnd in memory; it reports whether
// the entries changed.
func (c *EpochCache) truncateFromEndLocked(endOffset int64) bool {
	n := len(c.entries)
	for n > 0 && c.entries[n-1].StartOffset >= endOffset {
		n--
	}
	if n == len(c.entries) {
		return false
	}
	c.entries = c.entries[:n]
	return true
}

// TruncateFromStart drops the entries wholly before startOffset and moves
// the start of the one holding it up to it, as the log's start advances.
func (c *EpochCache) TruncateFromStart(startOffset int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.truncateFromStartLocked(startOffset) {
		return nil
	}
	return c.writeLocked()
}

// truncateFromStartLocked is TruncateFromStart in memory; it reports
// whether the entries changed.
func (c *EpochCache) truncateFromStartLocked(startOffset int64) bool {
	i := 0
	for i+1 < len(c.entries) && c.entries[i+1].StartOffset <= startOffset {
		i++
	}
	if i == 0 && (len(c.entries) == 0 || c.entries[0].StartOffset >= startOffset) {
		return false
	}
	c.entries = append([]EpochEntry(nil), c.entries[i:]...)
	if c.entries[0].StartOffset < startOffset {
		c.entries[0].StartOffset = startOffset
	}
	return true
}

// Reset replaces the entries (a rebuild from the log's batch headers).
func (c *EpochCache) Reset(entries []EpochEntry) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries = append([]EpochEntry(nil), entries...)
	return c.writeLocked()
}

// settle brings the entries into line with a log opened from start to end,
// as Open does: the entries at or past end go (they held no records), the
// first starts no earlier than start, and, unless the partition is
// replicated, epoch begins at end after check has approved the entries
// kept. It writes the file once, and only if the entries differ from what
// it holds (or force): reopening an idle partition, whose own epoch the
// file already ends with, writes nothing - that one entry is dropped as
// empty and assigned again, which used to cost two atomic rewrites.
func (c *EpochCache) settle(start, end int64, assign bool, epoch int32, check func([]EpochEntry) error, force bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	before := slices.Clone(c.entries)
	c.truncateFromEndLocked(end)
	c.truncateFromStartLocked(start)
	if assign {
		if err := check(slices.Clone(c.entries)); err != nil {
			return err
		}
		c.assignLocked(epoch, end)
	}
	if !force && slices.Equal(before, c.entries) {
		return nil
	}
	return c.writeLocked()
}

package partition

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spoolmq/spool/internal/vfs"
)

// HighWatermarkFile is where a replicated partition records its high
// watermark, in Kafka's replication-offset-checkpoint text format (version
// 0, a count, then "topic partition offset" lines) with this partition's one
// line. It is a hint: a restarted replica starts from it rather than from
// nothing, so that it can tell (and report) when a leader makes it cut
// records it knew as committed.
const HighWatermarkFile = "replication-offset-checkpoint"

// DefaultHighWatermarkCheckpointInterval is how often a changing high
// watermark is written (replica.high.watermark.checkpoint.interval.ms).
const DefaultHighWatermarkCheckpointInterval = 5 * time.Second

// hwCheckpoint writes the high watermark at most once an interval, in the
// background, and once more at close.
type hwCheckpoint struct {
	path     string
	topic    string
	id       int32
	interval time.Duration

	last      atomic.Int64 // unix nanos of the last write started
	scheduled atomic.Bool  // a write is due
	mu        sync.Mutex   // one write at a time; guards closed and written
	closed    bool
	written   int64
}

func (c *hwCheckpoint) encode(hw int64) []byte {
	return fmt.Appendf(nil, "0\n1\n%s %d %d\n", c.topic, c.id, hw)
}

// read returns the recorded high watermark; ok is false with no usable
// file.
func (c *hwCheckpoint) read() (int64, bool) {
	hw, err := readHighWatermark(c.path, c.topic, c.id)
	return hw, err == nil
}

// ErrBadHighWatermarkFile means a HighWatermarkFile does not parse or is
// another partition's. A replicated partition then ignores it and starts
// from its log start offset.
var ErrBadHighWatermarkFile = errors.New("partition: high watermark checkpoint is damaged")

// ReadHighWatermark reads the HighWatermarkFile of the replicated
// partition id of topic in dir, as Open does, without opening anything
// (tools use it). A missing file is reported with os.ErrNotExist, a
// damaged one with ErrBadHighWatermarkFile.
func ReadHighWatermark(dir, topic string, id int32) (int64, error) {
	return readHighWatermark(filepath.Join(dir, HighWatermarkFile), topic, id)
}

func readHighWatermark(path, topic string, id int32) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) != 3 || lines[0] != "0" || lines[1] != "1" {
		return 0, fmt.Errorf("%w: %s: want version 0 and one entry", ErrBadHighWatermarkFile, path)
	}
	f := strings.Fields(lines[2])
	if len(f) != 3 || f[0] != topic || f[1] != strconv.Itoa(int(id)) {
		return 0, fmt.Errorf("%w: %s: entry %q is not partition %d of topic %q", ErrBadHighWatermarkFile, path, lines[2], id, topic)
	}
	hw, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil || hw < 0 {
		return 0, fmt.Errorf("%w: %s: offset %q", ErrBadHighWatermarkFile, path, f[2])
	}
	return hw, nil
}

// maybeWrite arranges for the high watermark (read by get when the write
// happens) to be written in the background, at most once an interval: a
// change during the interval is written at its end, so the last value is
// never left unwritten.
func (c *hwCheckpoint) maybeWrite(get func() int64) {
	if !c.scheduled.CompareAndSwap(false, true) {
		return // a write is due; it will take the latest value
	}
	delay := time.Duration(c.last.Load() + int64(c.interval) - time.Now().UnixNano())
	time.AfterFunc(max(delay, 0), func() {
		c.last.Store(time.Now().UnixNano())
		c.scheduled.Store(false)
		c.write(get())
	})
}

func (c *hwCheckpoint) write(hw int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || hw == c.written {
		return nil
	}
	if err := vfs.WriteFileAtomic(vfs.Default, c.path, c.encode(hw)); err != nil {
		return fmt.Errorf("partition: write %s: %w", c.path, err)
	}
	c.written = hw
	return nil
}

// abandon stops later writes without writing, as a crash would.
func (c *hwCheckpoint) abandon() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
}

// close writes hw a last time and stops later writes.
func (c *hwCheckpoint) close(hw int64) error {
	err := c.write(hw)
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	return err
}

func newHWCheckpoint(dir, topic string, id int32, interval time.Duration) *hwCheckpoint {
	if interval <= 0 {
		interval = DefaultHighWatermarkCheckpointInterval
	}
	return &hwCheckpoint{path: filepath.Join(dir, HighWatermarkFile), topic: topic, id: id, interval: interval}
}

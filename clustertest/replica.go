package clustertest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/spoolmq/spool/record"
)

// ErrDump reports that "spool dump" could not read a replica whole: the
// files hold a problem, or a record it printed cannot be parsed back.
var ErrDump = errors.New("clustertest: dump")

// ReadReplica returns the records of this node's replica of a partition
// as its segment files hold them, in offset order: everything in the
// files, beyond the high watermark too. It runs "spool dump --records" on
// the partition's directory, so the node must not be running (ErrRunning);
// a replica the node does not hold is an error wrapping os.ErrNotExist.
// Values are those dump prints whole: up to 60 bytes (a longer one is an
// error wrapping ErrDump).
func (n *Node) ReadReplica(ctx context.Context, topic string, partition int32) ([]Record, error) {
	if n.Running() {
		return nil, fmt.Errorf("clustertest: read node %d's replica of %s-%d: %w", n.id, topic, partition, ErrRunning)
	}
	dir := filepath.Join(n.dir, fmt.Sprintf("%s-%d", topic, partition))
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("clustertest: read node %d's replica of %s-%d: %w", n.id, topic, partition, err)
	}
	segs, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		return nil, err
	}
	// Segment files are named by their base offset, zero-padded: the
	// names sort in offset order.
	slices.Sort(segs)
	if len(segs) == 0 {
		return nil, nil
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, n.c.bin, append([]string{"dump", "--records"}, segs...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%w: node %d's replica of %s-%d: %w\n%s%s", ErrDump, n.id, topic, partition, err, problems(stdout.String()), stderr.String())
	}
	recs, err := parseDump(partition, stdout.String())
	if err != nil {
		return nil, fmt.Errorf("%w: node %d's replica of %s-%d: %w", ErrDump, n.id, topic, partition, err)
	}
	return recs, nil
}

// problems picks dump's PROBLEM lines.
func problems(out string) string {
	var b strings.Builder
	for line := range strings.Lines(out) {
		if strings.HasPrefix(line, "PROBLEM:") {
			b.WriteString(line)
		}
	}
	return b.String()
}

// parseDump reads the record lines of "spool dump --records":
//
//	| offset: 7 timestamp: 1700000000000 key: null valueSize: 3 value: "abc" headers: 0
func parseDump(partition int32, out string) ([]Record, error) {
	var recs []Record
	for line := range strings.Lines(out) {
		rest, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "| offset: ")
		if !ok {
			continue
		}
		offStr, rest, ok := strings.Cut(rest, " ")
		if !ok {
			return nil, fmt.Errorf("cannot parse %q", line)
		}
		off, err := strconv.ParseInt(offStr, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("cannot parse %q: %w", line, err)
		}
		i := strings.Index(rest, " valueSize: ")
		j := strings.LastIndex(rest, " headers: ")
		if i < 0 || j < i {
			return nil, fmt.Errorf("cannot parse %q", line)
		}
		_, quoted, ok := strings.Cut(rest[i:j], " value: ")
		if !ok {
			return nil, fmt.Errorf("cannot parse %q", line)
		}
		var value string
		if quoted != "null" {
			value, err = strconv.Unquote(quoted)
			if err != nil {
				return nil, fmt.Errorf("value of offset %d not printed whole (longer than dump shows?): %q", off, quoted)
			}
		}
		recs = append(recs, Record{Partition: partition, Offset: off, Value: value})
	}
	return recs, nil
}

// Batch is a record batch as a replica's segment files hold it.
type Batch struct {
	BaseOffset, LastOffset int64
	// LeaderEpoch is the batch's partitionLeaderEpoch: the epoch of the
	// leader that appended it.
	LeaderEpoch int32
	// Sum is the SHA-256 of the batch's bytes, header included: two
	// replicas' batches with equal sums are byte-identical.
	Sum [sha256.Size]byte
	// Records are the batch's records.
	Records []Record
}

func (b Batch) String() string {
	return fmt.Sprintf("batch %d-%d epoch %d sha256 %x", b.BaseOffset, b.LastOffset, b.LeaderEpoch, b.Sum[:6])
}

// ReplicaLog is a node's copy of a partition as its segment files hold
// it: every whole batch, in offset order.
type ReplicaLog struct {
	Node      int32
	Topic     string
	Partition int32
	Batches   []Batch
	// Torn counts the bytes after the last whole batch of the last
	// segment: a write the process did not finish before it died, which
	// the node drops when it recovers the log.
	Torn int64
}

// Records are the records of every batch, in offset order.
func (l *ReplicaLog) Records() []Record {
	var out []Record
	for _, b := range l.Batches {
		out = append(out, b.Records...)
	}
	return out
}

// ReadReplicaLog reads this node's replica of a partition from its segment
// files, batch by batch, checking each batch's CRC: to compare replicas
// byte for byte (CompareReplicas). The node must not be running
// (ErrRunning); a replica the node does not hold is an error wrapping
// os.ErrNotExist, a damaged batch one wrapping ErrDump.
func (n *Node) ReadReplicaLog(topic string, partition int32) (*ReplicaLog, error) {
	what := fmt.Sprintf("node %d's replica of %s-%d", n.id, topic, partition)
	if n.Running() {
		return nil, fmt.Errorf("clustertest: read %s: %w", what, ErrRunning)
	}
	dir := filepath.Join(n.dir, fmt.Sprintf("%s-%d", topic, partition))
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("clustertest: read %s: %w", what, err)
	}
	segs, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		return nil, err
	}
	slices.Sort(segs)
	out := &ReplicaLog{Node: n.id, Topic: topic, Partition: partition}
	for i, seg := range segs {
		buf, err := os.ReadFile(seg)
		if err != nil {
			return nil, fmt.Errorf("clustertest: read %s: %w", what, err)
		}
		for pos := 0; pos < len(buf); {
			b, size, err := record.ParseBatch(buf[pos:])
			if err != nil {
				if i == len(segs)-1 {
					out.Torn = int64(len(buf) - pos)
					break
				}
				return nil, fmt.Errorf("%w: %s: %s position %d: %w", ErrDump, what, seg, pos, err)
			}
			if err := b.Verify(); err != nil {
				return nil, fmt.Errorf("%w: %s: %s position %d: %w", ErrDump, what, seg, pos, err)
			}
			recs, err := b.Records()
			if err != nil {
				return nil, fmt.Errorf("%w: %s: %s position %d: %w", ErrDump, what, seg, pos, err)
			}
			rb := Batch{BaseOffset: b.BaseOffset(), LastOffset: b.LastOffset(), LeaderEpoch: b.PartitionLeaderEpoch(),
				Sum: sha256.Sum256(b.Bytes())}
			for _, r := range recs {
				rb.Records = append(rb.Records, Record{Partition: partition, Offset: r.Offset, Value: string(r.Value)})
			}
			out.Batches = append(out.Batches, rb)
			pos += size
		}
	}
	return out, nil
}

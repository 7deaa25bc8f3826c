package spool

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spoolmq/spool/internal/vfs"
	"github.com/spoolmq/spool/record"
)

// TopicID is a topic's stable identity: 16 random bytes, as Kafka's topic
// UUIDs. A topic deleted and created again under the same name gets a new
// one, so nothing of the old incarnation is mistaken for the new.
type TopicID [16]byte

// String is the ID in Kafka's notation: URL-safe base64 without padding.
func (id TopicID) String() string { return base64.RawURLEncoding.EncodeToString(id[:]) }

// ParseTopicID parses the notation String produces.
func ParseTopicID(s string) (TopicID, error) {
	var id TopicID
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != len(id) {
		return id, fmt.Errorf("spool: topic id %q: not 16 bytes of base64", s)
	}
	copy(id[:], b)
	return id, nil
}

func newTopicID() TopicID {
	var id TopicID
	for id == (TopicID{}) { // the zero ID means "none" in Kafka
		_, _ = rand.Read(id[:])
	}
	return id
}

// The registry is the file that lists the topics: names, IDs, partition
// counts and each topic's own settings. It is replaced atomically with a
// CRC, like the logs' checkpoints.
//
//	<data dir>/topics.json          the registry
//	<data dir>/<topic>-<n>/         partition n of a topic
//	  partition.metadata            "version: 0" and "topic_id: <id>", as Kafka writes it
//	<data dir>/<topic>-<n>.<id>-delete/   a deleted topic's partition, being removed
//	<data dir>/<topic>-<n>.<id>-create/   a partition being created, before its metadata is written
const (
	registryFile      = "topics.json"
	partitionMetaFile = "partition.metadata"
	deleteSuffix      = "-delete"
	createSuffix      = "-create"
)

type registry struct {
	Version int             `json:"version"`
	Topics  []registryTopic `json:"topics"`
}

type registryTopic struct {
	Name       string      `json:"name"`
	ID         string      `json:"id"`
	Partitions int32       `json:"partitions"`
	Config     topicConfig `json:"config,omitempty"`
	Created    time.Time   `json:"created"`
	Internal   bool        `json:"internal,omitempty"`
}

// topicConfig is TopicConfig in the registry, under Kafka's names; only the
// fields a topic sets itself are written.
type topicConfig struct {
	SegmentBytes   int64   `json:"segment.bytes,omitempty"`
	SegmentMs      int64   `json:"segment.ms,omitempty"`
	RetentionMs    int64   `json:"retention.ms,omitempty"`
	RetentionBytes int64   `json:"retention.bytes,omitempty"`
	CleanupPolicy  string  `json:"cleanup.policy,omitempty"`
	Compression    int8    `json:"compression.type,omitempty"`
	MaxMessage     int     `json:"max.message.bytes,omitempty"`
	DeleteMs       int64   `json:"delete.retention.ms,omitempty"`
	MinLagMs       int64   `json:"min.compaction.lag.ms,omitempty"`
	MaxLagMs       int64   `json:"max.compaction.lag.ms,omitempty"`
	DirtyRatio     float64 `json:"min.cleanable.dirty.ratio,omitempty"`
	MinISR         int     `json:"min.insync.replicas,omitempty"`
	Unclean        bool    `json:"unclean.leader.election.enable,omitempty"`
}

func toStored(c TopicConfig) topicConfig {
	return topicConfig{
		SegmentBytes:   c.SegmentBytes,
		SegmentMs:      c.SegmentAge.Milliseconds(),
		RetentionMs:    durationMs(c.RetentionTime),
		RetentionBytes: c.RetentionBytes,
		CleanupPolicy:  string(c.CleanupPolicy),
		Compression:    int8(c.Compression),
		MaxMessage:     c.MaxMessageBytes,
		DeleteMs:       c.DeleteRetention.Milliseconds(),
		MinLagMs:       c.MinCompactionLag.Milliseconds(),
		MaxLagMs:       c.MaxCompactionLag.Milliseconds(),
		DirtyRatio:     c.MinCleanableDirtyRatio,
		MinISR:         c.MinInSyncReplicas,
		Unclean:        c.UncleanLeaderElection,
	}
}

func durationMs(d time.Duration) int64 {
	if d < 0 {
		return -1
	}
	return d.Milliseconds()
}

func fromStored(s topicConfig, partitions int32) TopicConfig {
	c := TopicConfig{
		Partitions:             partitions,
		SegmentBytes:           s.SegmentBytes,
		SegmentAge:             time.Duration(s.SegmentMs) * time.Millisecond,
		RetentionTime:          time.Duration(s.RetentionMs) * time.Millisecond,
		RetentionBytes:         s.RetentionBytes,
		CleanupPolicy:          CleanupPolicy(s.CleanupPolicy),
		MaxMessageBytes:        s.MaxMessage,
		DeleteRetention:        time.Duration(s.DeleteMs) * time.Millisecond,
		MinCompactionLag:       time.Duration(s.MinLagMs) * time.Millisecond,
		MaxCompactionLag:       time.Duration(s.MaxLagMs) * time.Millisecond,
		MinCleanableDirtyRatio: s.DirtyRatio,
		MinInSyncReplicas:      s.MinISR,
		UncleanLeaderElection:  s.Unclean,
	}
	c.Compression = record.Codec(s.Compression)
	if s.RetentionMs < 0 {
		c.RetentionTime = -1
	}
	return c
}

var errBadRegistry = errors.New("spool: topic registry is damaged")

// readRegistry reads the registry; a missing file is os.ErrNotExist.
func readRegistry(dir string) (registry, error) {
	var r registry
	data, err := os.ReadFile(filepath.Join(dir, registryFile))
	if err != nil {
		return r, err
	}
	body, sum, ok := strings.Cut(string(data), "\ncrc32c ")
	want, perr := strconv.ParseUint(strings.TrimSpace(sum), 16, 32)
	if !ok || perr != nil || uint32(want) != crc32.Checksum([]byte(body), castagnoli) {
		return r, fmt.Errorf("%w: %s: crc32c mismatch", errBadRegistry, filepath.Join(dir, registryFile))
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		return r, fmt.Errorf("%w: %v", errBadRegistry, err)
	}
	if r.Version != 1 {
		return r, fmt.Errorf("%w: %s: version %d, want 1", errBadRegistry, filepath.Join(dir, registryFile), r.Version)
	}
	if err := r.validate(); err != nil {
		return r, fmt.Errorf("%w: %s: %w", errBadRegistry, filepath.Join(dir, registryFile), err)
	}
	return r, nil
}

// validate checks what the CRC cannot: that the registry describes topics
// Open can open side by side - valid, distinct names (a name becomes a
// directory name), distinct non-zero IDs, no negative partition count. Open
// never writes anything else, so anything else is damage or a hand edit. It
// returns every problem, joined.
func (r registry) validate() error {
	var errs []error
	names := map[string]bool{}
	ids := map[TopicID]string{}
	for i, rt := range r.Topics {
		if err := ValidTopicName(rt.Name); err != nil {
			errs = append(errs, fmt.Errorf("topic %d: %w", i, err))
		} else if names[rt.Name] {
			errs = append(errs, fmt.Errorf("topic %d: %q is listed twice", i, rt.Name))
		}
		names[rt.Name] = true
		id, err := ParseTopicID(rt.ID)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("topic %q: %w", rt.Name, err))
		case id == TopicID{}:
			errs = append(errs, fmt.Errorf("topic %q: the zero topic id", rt.Name))
		case ids[id] != "":
			errs = append(errs, fmt.Errorf("topic %q: id %s is also %q's", rt.Name, id, ids[id]))
		default:
			ids[id] = rt.Name
		}
		if rt.Partitions < 0 {
			errs = append(errs, fmt.Errorf("topic %q: %d partitions", rt.Name, rt.Partitions))
		}
	}
	return errors.Join(errs...)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func writeRegistry(dir string, r registry) error { return writeRegistryFS(vfs.Default, dir, r) }

func writeRegistryFS(fsys vfs.FS, dir string, r registry) error {
	r.Version = 1
	body, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	data := fmt.Appendf(body, "\ncrc32c %08x\n", crc32.Checksum(body, castagnoli))
	if err := vfs.WriteFileAtomic(fsys, filepath.Join(dir, registryFile), data); err != nil {
		return fmt.Errorf("spool: write topic registry: %w", err)
	}
	return nil
}

// records reports whether the registry has the topic whose ID is id with
// at least n partitions.
func (r registry) records(id TopicID, n int32) bool {
	for _, t := range r.Topics {
		if t.ID == id.String() && t.Partitions >= n {
			return true
		}
	}
	return false
}

// partitionDir is the directory of partition n of topic.
func partitionDir(dir, topic string, n int32) string {
	return filepath.Join(dir, topic+"-"+strconv.Itoa(int(n)))
}

// isCreatingDir reports whether name is "<topic>-<n>.<topic id>-create": a
// partition directory being created. Nothing else in the data directory is
// taken for one.
func isCreatingDir(name string) bool {
	rest, ok := strings.CutSuffix(name, createSuffix)
	i := strings.LastIndexByte(rest, '.')
	if !ok || i < 0 {
		return false
	}
	if _, err := ParseTopicID(rest[i+1:]); err != nil {
		return false
	}
	_, _, ok = parsePartitionDir(rest[:i])
	return ok
}

// parsePartitionDir splits "<topic>-<n>" (topic names may hold '-').
func parsePartitionDir(name string) (topic string, n int32, ok bool) {
	i := strings.LastIndexByte(name, '-')
	if i <= 0 {
		return "", 0, false
	}
	v, err := strconv.ParseInt(name[i+1:], 10, 32)
	if err != nil || v < 0 || strconv.Itoa(int(v)) != name[i+1:] {
		return "", 0, false
	}
	return name[:i], int32(v), true
}

// writePartitionMeta records the topic ID in a partition directory, as
// Kafka's partition.metadata does.
func writePartitionMeta(dir string, id TopicID) error {
	return writePartitionMetaFS(vfs.Default, dir, id)
}

func writePartitionMetaFS(fsys vfs.FS, dir string, id TopicID) error {
	data := []byte("version: 0\ntopic_id: " + id.String() + "\n")
	return vfs.WriteFileAtomic(fsys, filepath.Join(dir, partitionMetaFile), data)
}

// partitionDirNames lists the entries of the data directory dir that Open
// takes for partition directories: directories named <topic>-<n>.
func partitionDirNames(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if _, _, ok := parsePartitionDir(e.Name()); ok && e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// errNoRegistry is Open's refusal of a data directory that has partition
// directories but no registry: which of them are data, and of which topic
// incarnation, only the registry says, and Open never guesses.
func errNoRegistry(dir string, partitionDirs []string) error {
	return fmt.Errorf("%w: %s has partition directories (%s, ...) but no %s", errBadRegistry, dir, partitionDirs[0], registryFile)
}

// checkPartitionMeta compares the topic ID a partition directory records
// with its topic's, as Open does before it opens the partition: missing
// reports that there is no partition.metadata (Open writes it from the
// registry); an unreadable file or another topic's ID is an error, on
// which Open refuses.
func checkPartitionMeta(dir, topic string, want TopicID) (missing bool, err error) {
	id, err := readPartitionMeta(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return true, nil
	case err != nil:
		return false, err
	case id != want:
		return false, fmt.Errorf("spool: %s belongs to topic id %s, not %s's %s", dir, id, topic, want)
	}
	return false, nil
}

// isDeletedDir reports whether name is a deleted topic's partition
// directory, renamed aside to be removed (<topic>-<n>.<id>-delete).
func isDeletedDir(name string) bool {
	return len(name) > len(deleteSuffix) && strings.HasSuffix(name, deleteSuffix)
}

// leftover decides what Open does, once the registered topics are open,
// with the partition directory dir (named name): remove it when its
// partition.metadata names a topic ID that owned says is not a partition
// of a registered topic at that number (a deleted topic's, left by a crash
// between the registry update and the rename). An error means the metadata
// cannot be read: Open leaves such a directory alone.
func leftover(dir, name string, owned func(topic string, n int32, id TopicID) bool) (remove bool, id TopicID, err error) {
	tn, n, _ := parsePartitionDir(name)
	id, err = readPartitionMeta(dir)
	if err != nil {
		return false, id, err
	}
	return !owned(tn, n, id), id, nil
}

// readPartitionMeta returns the topic ID recorded in a partition directory.
func readPartitionMeta(dir string) (TopicID, error) {
	data, err := os.ReadFile(filepath.Join(dir, partitionMetaFile))
	if err != nil {
		return TopicID{}, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "topic_id: "); ok {
			id, err := ParseTopicID(strings.TrimSpace(v))
			if err != nil {
				return id, fmt.Errorf("%s: %w", filepath.Join(dir, partitionMetaFile), err)
			}
			return id, nil
		}
	}
	return TopicID{}, fmt.Errorf("spool: %s: no topic_id", filepath.Join(dir, partitionMetaFile))
}

// ValidTopicName checks a topic name as Kafka does: 1 to 249 characters of
// [a-zA-Z0-9._-], and not "." or "..".
func ValidTopicName(name string) error {
	if name == "" || name == "." || name == ".." || len(name) > 249 {
		return fmt.Errorf("%w: %q", ErrInvalidTopic, name)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: %q has %q; use [a-zA-Z0-9._-]", ErrInvalidTopic, name, c)
		}
	}
	return nil
}

package controller

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/hashicorp/raft"
	"github.com/spoolmq/spool/internal/vfs"
	"github.com/spoolmq/spool/record"
)

// ErrBadStableStore means the stable store's file is damaged: its CRC or
// layout is wrong. It wraps record.ErrCorrupt. The store refuses to open
// rather than read the term and vote as zero, which could let the node vote
// twice in one term.
var ErrBadStableStore = fmt.Errorf("controller: raft stable store is damaged: %w", record.ErrCorrupt)

// ReserveSuffix names the file a StableStore keeps space in reserve with
// (the store's path and this suffix), and ReserveBytes is its size.
const (
	ReserveSuffix = ".reserve"
	ReserveBytes  = 64 << 10
)

// QuorumStateFile is the conventional name of the stable store's file, in
// the Raft log's directory, as KRaft keeps its quorum-state in
// __cluster_metadata-0/.
const QuorumStateFile = "quorum-state"

const stableMagic = "spool-raft-stable 1"

// StableStore is hashicorp/raft's StableStore - the current term and the
// last vote, which Raft must never forget - kept in one small text file
// that is replaced whole on every Set:
//
//	spool-raft-stable 1
//	"CurrentTerm" u 7
//	"LastVoteCand" b 6e6f64652d32
//	"LastVoteTerm" u 7
//	crc32c 5e3a9b1c
//
// One line per key, sorted: the key Go-quoted, then "u" and the decimal
// value of a SetUint64, or "b" and the hex bytes of a Set; the last line is
// the CRC-32C (Castagnoli) of everything before it. A Set writes a
// temporary file, fsyncs it, renames it over the file and fsyncs the
// directory before it returns, so after a crash the file holds the old
// value or the new one, never a mix; a file that fails its CRC is an error
// naming it (ErrBadStableStore), never read as empty.
//
// A missing file is an empty store: a node that has never voted. Put it
// where the node's other state is (QuorumStateFile in the Raft log's
// directory); if it is there, open the LogStore first: its recovery removes
// temporary files, as a crash leaves them.
//
// A Set needs a little free space for the new file. hashicorp/raft cannot
// run on when it cannot record a new term (it panics), so the store keeps
// that space in reserve: a file of ReserveBytes beside its own
// (path+ReserveSuffix), allocated after each Set while there is room. A
// Set that finds the disk full (ENOSPC) removes the reserve and writes
// again; the old file is intact until the new one is renamed over it, so
// the retry is safe. A voter whose disk fills up thus goes on voting and
// following terms rather than dying at the next election.
//
// A Set that fails leaves the file's contents uncertain: the store then
// refuses every call until it is reopened. A StableStore is safe for
// concurrent use.
type StableStore struct {
	path string
	fs   vfs.FS

	mu     sync.Mutex
	vals   map[string]stableValue
	broken error
}

// stableValue is a value and whether SetUint64 wrote it.
type stableValue struct {
	b    []byte
	uint bool
}

var _ raft.StableStore = (*StableStore)(nil)

// OpenStableStore reads the stable store in the file at path (an empty
// store if there is none).
func OpenStableStore(path string) (*StableStore, error) {
	return openStableStore(vfs.Default, path)
}

func openStableStore(fsys vfs.FS, path string) (*StableStore, error) {
	s := &StableStore{path: path, fs: fsys, vals: map[string]stableValue{}}
	data, err := vfs.ReadFile(fsys, path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("controller: raft stable store: %w", err)
	}
	if s.vals, err = parseStable(data); err != nil {
		return nil, fmt.Errorf("%w: %s: %s", ErrBadStableStore, path, err)
	}
	return s, nil
}

// Path is the store's file.
func (s *StableStore) Path() string { return s.path }

// Set implements raft.StableStore: key holds val, on stable storage, when
// it returns.
func (s *StableStore) Set(key, val []byte) error {
	return s.set(key, stableValue{b: bytes.Clone(val)})
}

// SetUint64 implements raft.StableStore.
func (s *StableStore) SetUint64(key []byte, val uint64) error {
	return s.set(key, stableValue{b: binary.BigEndian.AppendUint64(nil, val), uint: true})
}

// Get implements raft.StableStore: the value of key, nil if it has none.
func (s *StableStore) Get(key []byte) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken != nil {
		return nil, s.broken
	}
	v, ok := s.vals[string(key)]
	if !ok {
		return nil, nil
	}
	return append([]byte{}, v.b...), nil
}

// GetUint64 implements raft.StableStore: the value of key, 0 if it has
// none. A value that is not 8 bytes is an error.
func (s *StableStore) GetUint64(key []byte) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken != nil {
		return 0, s.broken
	}
	v, ok := s.vals[string(key)]
	if !ok {
		return 0, nil
	}
	if len(v.b) != 8 {
		return 0, fmt.Errorf("controller: raft stable store %s: key %q holds %d bytes, not a uint64", s.path, key, len(v.b))
	}
	return binary.BigEndian.Uint64(v.b), nil
}

func (s *StableStore) set(key []byte, v stableValue) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken != nil {
		return s.broken
	}
	if old, ok := s.vals[string(key)]; ok && old.uint == v.uint && bytes.Equal(old.b, v.b) {
		return nil // already on stable storage
	}
	vals := maps.Clone(s.vals)
	vals[string(key)] = v
	data := encodeStable(vals)
	err := vfs.WriteFileAtomic(s.fs, s.path, data)
	for errors.Is(err, syscall.ENOSPC) && s.spendReserve() {
		// The disk is full: spend some of the reserve. The failed write
		// never reached the rename, so the file still holds the old
		// value.
		err = vfs.WriteFileAtomic(s.fs, s.path, data)
	}
	if err != nil {
		s.broken = fmt.Errorf("controller: raft stable store %s: a write failed, the file may hold the old or the new value; reopen: %w", s.path, err)
		return s.broken
	}
	s.vals = vals
	s.refillReserve()
	return nil
}

// reserveStep is what one Set on a full disk frees of the reserve: room
// for the new file (a few hundred bytes) on any file system's blocks.
const reserveStep = 8 << 10

// spendReserve frees reserveStep of the reserve (the file shrinks; the
// last step removes it) and reports whether it freed anything.
func (s *StableStore) spendReserve() bool {
	p := s.path + ReserveSuffix
	st, err := s.fs.Stat(p)
	if err != nil {
		return false
	}
	if st.Size() <= reserveStep {
		return s.fs.Remove(p) == nil
	}
	f, err := s.fs.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	return f.Truncate(st.Size()-reserveStep) == nil
}

// refillReserve grows the reserve file back to ReserveBytes if it is
// short and there is room; it gives up quietly otherwise (the next Set
// tries again).
func (s *StableStore) refillReserve() {
	p := s.path + ReserveSuffix
	st, err := s.fs.Stat(p)
	if err == nil && st.Size() >= ReserveBytes {
		return
	}
	f, err := s.fs.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return
	}
	err = f.Allocate(0, ReserveBytes)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil && st == nil {
		// A reserve just created and left partial: its size would be
		// taken for real room.
		_ = s.fs.Remove(p)
	}
}

func encodeStable(vals map[string]stableValue) []byte {
	var b bytes.Buffer
	b.WriteString(stableMagic + "\n")
	for _, k := range slices.Sorted(maps.Keys(vals)) {
		v := vals[k]
		if v.uint {
			fmt.Fprintf(&b, "%s u %d\n", strconv.Quote(k), binary.BigEndian.Uint64(v.b))
		} else {
			fmt.Fprintf(&b, "%s b %s\n", strconv.Quote(k), hex.EncodeToString(v.b))
		}
	}
	fmt.Fprintf(&b, "crc32c %08x\n", crc32.Checksum(b.Bytes(), castagnoli))
	return b.Bytes()
}

// parseStable decodes the file; its errors say what is wrong.
func parseStable(data []byte) (map[string]stableValue, error) {
	i := bytes.LastIndex(data, []byte("crc32c "))
	if i < 0 {
		return nil, errors.New("no crc32c line")
	}
	if got, want := string(data[i:]), fmt.Sprintf("crc32c %08x\n", crc32.Checksum(data[:i], castagnoli)); got != want {
		return nil, fmt.Errorf("last line %q, want %q", got, want)
	}
	lines := strings.Split(string(data[:i]), "\n")
	if len(lines) < 2 || lines[0] != stableMagic || lines[len(lines)-1] != "" {
		return nil, errors.New("unexpected layout")
	}
	vals := map[string]stableValue{}
	for n, line := range lines[1 : len(lines)-1] {
		quoted, err := strconv.QuotedPrefix(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: key: %v", n+2, err)
		}
		key, _ := strconv.Unquote(quoted)
		kind, val, ok := strings.Cut(strings.TrimPrefix(line[len(quoted):], " "), " ")
		var v stableValue
		switch {
		case ok && kind == "u":
			u, err := strconv.ParseUint(val, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("line %d: %v", n+2, err)
			}
			v = stableValue{b: binary.BigEndian.AppendUint64(nil, u), uint: true}
		case ok && kind == "b":
			b, err := hex.DecodeString(val)
			if err != nil {
				return nil, fmt.Errorf("line %d: %v", n+2, err)
			}
			v = stableValue{b: b}
		default:
			return nil, fmt.Errorf("line %d: want a kind u or b and a value", n+2)
		}
		if _, dup := vals[key]; dup {
			return nil, fmt.Errorf("line %d: key %s twice", n+2, quoted)
		}
		vals[key] = v
	}
	return vals, nil
}

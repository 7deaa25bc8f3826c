package quota

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"strings"

	"github.com/spoolmq/spool/internal/vfs"
)

// FileStore keeps quotas in one file, replaced atomically (written aside,
// synced, renamed over, directory synced):
//
//	spool-quotas 1
//	[{"Entity":{"HasUser":true,"User":"alice",...},"Values":{"producer_byte_rate":1048576}}, ...]
//	crc32c 5e3a9b1c
//
// The last line is the CRC-32C of the lines before it.
type FileStore struct {
	path string
}

// ErrBadFile means the quota file is damaged; it is never guessed at.
var ErrBadFile = errors.New("quota: quota file is damaged")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type fileEntry struct {
	Entity Entity
	Values map[Key]float64
}

// OpenFile returns the store at path and the quotas it holds (none if the
// file does not exist yet).
func OpenFile(path string) (*FileStore, map[Entity]map[Key]float64, error) {
	data, err := vfs.ReadFile(vfs.Default, path)
	if errors.Is(err, os.ErrNotExist) {
		return &FileStore{path: path}, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	qs, err := decodeFile(data)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %v (restore it from a backup, or delete it and set the quotas again)", ErrBadFile, path, err)
	}
	return &FileStore{path: path}, qs, nil
}

func decodeFile(data []byte) (map[Entity]map[Key]float64, error) {
	body, tail, ok := bytes.Cut(data, []byte("\ncrc32c "))
	if !ok {
		return nil, errors.New("no crc32c line")
	}
	body = append(body, '\n')
	var sum uint32
	if _, err := fmt.Sscanf(strings.TrimSpace(string(tail)), "%08x", &sum); err != nil {
		return nil, fmt.Errorf("crc32c line: %v", err)
	}
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, errors.New("crc32c mismatch")
	}
	header, js, ok := bytes.Cut(body, []byte("\n"))
	if !ok || string(header) != "spool-quotas 1" {
		return nil, fmt.Errorf("header %q", header)
	}
	var entries []fileEntry
	if err := json.Unmarshal(js, &entries); err != nil {
		return nil, err
	}
	out := make(map[Entity]map[Key]float64, len(entries))
	for _, e := range entries {
		if err := e.Entity.Validate(); err != nil {
			return nil, err
		}
		for k, v := range e.Values {
			if err := ValidValue(k, v); err != nil {
				return nil, err
			}
		}
		out[e.Entity] = e.Values
	}
	return out, nil
}

// Save implements Store.
func (s *FileStore) Save(qs map[Entity]map[Key]float64) error {
	entries := []fileEntry{}
	for _, e := range Sorted(qs) {
		entries = append(entries, fileEntry{Entity: e, Values: qs[e]})
	}
	js, err := json.Marshal(entries)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	buf.WriteString("spool-quotas 1\n")
	buf.Write(js)
	buf.WriteByte('\n')
	fmt.Fprintf(&buf, "crc32c %08x\n", crc32.Checksum(buf.Bytes(), castagnoli))
	return vfs.WriteFileAtomic(vfs.Default, s.path, buf.Bytes())
}

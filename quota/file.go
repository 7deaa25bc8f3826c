package quota

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/spoolmq/spool/internal/crcfile"
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

// quotasHeader is the first line of a FileStore's file.
const quotasHeader = "spool-quotas 1"

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
	js, err := crcfile.Decode(data, quotasHeader)
	if err != nil {
		return nil, err
	}
	return Unmarshal(js)
}

// Marshal encodes quotas as JSON: the FileStore's and a cluster's metadata
// log's form, [{"Entity":{...},"Values":{"producer_byte_rate":1048576}}, ...].
func Marshal(qs map[Entity]map[Key]float64) ([]byte, error) {
	entries := []fileEntry{}
	for _, e := range Sorted(qs) {
		entries = append(entries, fileEntry{Entity: e, Values: qs[e]})
	}
	return json.Marshal(entries)
}

// Unmarshal decodes what Marshal encoded; an invalid entity or value is an
// error.
func Unmarshal(js []byte) (map[Entity]map[Key]float64, error) {
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
	js, err := Marshal(qs)
	if err != nil {
		return err
	}
	return vfs.WriteFileAtomic(vfs.Default, s.path, crcfile.Encode(quotasHeader, js))
}

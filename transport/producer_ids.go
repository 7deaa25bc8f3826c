package transport

import (
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/spoolmq/spool/internal/vfs"
)

// ProducerIDsFile is the file in the broker's data directory that holds the
// start of the next block of producer ids:
//
//	spool-producer-ids 1
//	next-block 3000
//	crc32c 5e3a9b1c
//
// The crc32c line is the CRC-32C of the lines before it. The file is
// replaced atomically.
const ProducerIDsFile = "producer-ids"

// producerIDBlock is how many producer ids one write of the file reserves,
// so that handing one out rarely costs an fsync (Kafka's controller hands
// brokers blocks of 1000 the same way).
const producerIDBlock = 1000

// producerIDs hands out producer ids for InitProducerId: unique for the
// life of the data directory, never reused, because a partition keeps the
// sequence state of an id (and a reused id with epoch 0 would be taken for
// an old producer). The id ranges are reserved on stable storage before
// any id in them is handed out; a restart skips what was left of a block.
type producerIDs struct {
	path string

	mu    sync.Mutex
	next  int64 // the next id to hand out
	limit int64 // end of the reserved block (what the file says)
}

// producerIDFiles keeps one allocator per data directory in the process:
// two Servers of one Broker must not hand out the same ids.
var producerIDFiles sync.Map // absolute path -> *producerIDs

var errBadProducerIDs = errors.New("transport: producer id file is damaged")

// ReadProducerIDs reads the ProducerIDsFile of the data directory dir, as
// NewServer does, without writing anything (tools use it), and returns the
// next block's start: every producer id below it may have been handed out.
// A missing file is reported with os.ErrNotExist (NewServer starts from
// 0); a damaged one is an error NewServer refuses to start with.
func ReadProducerIDs(dir string) (int64, error) {
	return readProducerIDs(filepath.Join(dir, ProducerIDsFile))
}

func readProducerIDs(path string) (int64, error) {
	data, err := vfs.ReadFile(vfs.Default, path)
	if err != nil {
		return 0, err
	}
	next, err := parseProducerIDs(data)
	if err != nil {
		// Never guess: a wrong guess reuses ids.
		return 0, fmt.Errorf("%w: %s: %v (restore it, or replace it with a next-block above every producer id handed out)", errBadProducerIDs, path, err)
	}
	return next, nil
}

// openProducerIDs reads (or starts) the allocator of the data directory
// dir.
func openProducerIDs(dir string) (*producerIDs, error) {
	path, err := filepath.Abs(filepath.Join(dir, ProducerIDsFile))
	if err != nil {
		return nil, err
	}
	if v, ok := producerIDFiles.Load(path); ok {
		return v.(*producerIDs), nil
	}
	next, err := readProducerIDs(path)
	if errors.Is(err, os.ErrNotExist) {
		next, err = 0, nil
	}
	if err != nil {
		return nil, err
	}
	p := &producerIDs{path: path, next: next, limit: next}
	v, _ := producerIDFiles.LoadOrStore(path, p)
	return v.(*producerIDs), nil
}

// allocate hands out a new producer id.
func (p *producerIDs) allocate() (int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.next >= p.limit {
		if p.limit > math.MaxInt64-producerIDBlock {
			return -1, errors.New("transport: producer ids exhausted")
		}
		limit := p.limit + producerIDBlock
		if err := vfs.WriteFileAtomic(vfs.Default, p.path, formatProducerIDs(limit)); err != nil {
			return -1, fmt.Errorf("transport: reserve producer ids: %w", err)
		}
		p.next, p.limit = max(p.next, p.limit), limit
	}
	id := p.next
	p.next++
	return id, nil
}

// issued reports whether id was handed out (by this process or an earlier
// one): every id below next was.
func (p *producerIDs) issued(id int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return id >= 0 && id < p.next
}

func formatProducerIDs(next int64) []byte {
	body := fmt.Sprintf("spool-producer-ids 1\nnext-block %d\n", next)
	return fmt.Appendf(nil, "%scrc32c %08x\n", body, crc32.Checksum([]byte(body), crc32.MakeTable(crc32.Castagnoli)))
}

func parseProducerIDs(data []byte) (int64, error) {
	s := string(data)
	i := strings.Index(s, "crc32c ")
	if i < 0 || !strings.HasPrefix(s, "spool-producer-ids 1\n") {
		return 0, errors.New("bad layout")
	}
	crc, err := strconv.ParseUint(strings.TrimSpace(s[i+len("crc32c "):]), 16, 32)
	if err != nil || uint32(crc) != crc32.Checksum([]byte(s[:i]), crc32.MakeTable(crc32.Castagnoli)) {
		return 0, errors.New("bad crc")
	}
	v, ok := strings.CutPrefix(strings.TrimSpace(s[len("spool-producer-ids 1\n"):i]), "next-block ")
	if !ok {
		return 0, errors.New("bad layout")
	}
	next, err := strconv.ParseInt(v, 10, 64)
	if err != nil || next < 0 {
		return 0, fmt.Errorf("bad next-block %q", v)
	}
	return next, nil
}

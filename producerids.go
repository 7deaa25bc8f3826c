package spool

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/spoolmq/spool/controller"
	"github.com/spoolmq/spool/internal/vfs"
)

// ProducerIDsFile is the file in a standalone broker's data directory that
// holds the start of the next block of producer ids:
//
//	spool-producer-ids 1
//	next-block 3000
//	crc32c 5e3a9b1c
//
// The crc32c line is the CRC-32C of the lines before it. The file is
// replaced atomically. A cluster node takes its blocks from the controller
// instead (the metadata log's ProducerIDs records).
const ProducerIDsFile = "producer-ids"

// producerIDBlock is how many producer ids one reservation covers, so that
// handing one out rarely costs an fsync or a controller round trip.
const producerIDBlock = controller.ProducerIDBlock

// producerIDs hands out producer ids for idempotent producers: unique for
// the life of the data directory (or cluster), never reused, because a
// partition keeps the sequence state of an id (and a reused id with epoch 0
// would be taken for an old producer). Blocks are reserved - on stable
// storage, or by the controller - before any id in them is handed out; a
// restart skips what was left of a block.
type producerIDs struct {
	// reserve reserves the block after limit and returns its first id.
	reserve func(ctx context.Context, limit int64) (int64, error)
	// issuedBelow reports the lowest id never handed out by anyone, when
	// that is known beyond this process (a cluster); nil otherwise.
	issuedBelow func() int64

	mu    sync.Mutex
	next  int64 // the next id to hand out
	limit int64 // end of the reserved block
}

var errBadProducerIDs = errors.New("spool: producer id file is damaged")

// ReadProducerIDs reads the start of the next block of producer ids from
// a standalone data directory's ProducerIDsFile, as Open does, writing
// nothing (tools use it). A missing file is os.ErrNotExist; a damaged one
// an error Open refuses to start with.
func ReadProducerIDs(dir string) (int64, error) {
	path := filepath.Join(dir, ProducerIDsFile)
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

// openProducerIDs reads (or starts) the allocator of a standalone data
// directory.
func openProducerIDs(dir string) (*producerIDs, error) {
	path := filepath.Join(dir, ProducerIDsFile)
	next, err := ReadProducerIDs(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	p := &producerIDs{next: next, limit: next}
	p.reserve = func(_ context.Context, limit int64) (int64, error) {
		if limit > math.MaxInt64-producerIDBlock {
			return 0, errors.New("spool: producer ids exhausted")
		}
		if err := vfs.WriteFileAtomic(vfs.Default, path, formatProducerIDs(limit+producerIDBlock)); err != nil {
			return 0, fmt.Errorf("spool: reserve producer ids: %w", err)
		}
		return limit, nil
	}
	return p, nil
}

// allocate hands out a new producer id.
func (p *producerIDs) allocate(ctx context.Context) (int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.next >= p.limit {
		first, err := p.reserve(ctx, p.limit)
		if err != nil {
			return -1, err
		}
		p.next, p.limit = first, first+producerIDBlock
	}
	id := p.next
	p.next++
	return id, nil
}

// issued reports whether id was handed out (by this process or an earlier
// one, or in a cluster by any broker).
func (p *producerIDs) issued(id int64) bool {
	if p.issuedBelow != nil {
		return id >= 0 && id < p.issuedBelow()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return id >= 0 && id < p.next
}

func formatProducerIDs(next int64) []byte {
	body := fmt.Sprintf("spool-producer-ids 1\nnext-block %d\n", next)
	return fmt.Appendf(nil, "%scrc32c %08x\n", body, crc32.Checksum([]byte(body), castagnoli))
}

func parseProducerIDs(data []byte) (int64, error) {
	s := string(data)
	i := strings.Index(s, "crc32c ")
	if i < 0 || !strings.HasPrefix(s, "spool-producer-ids 1\n") {
		return 0, errors.New("bad layout")
	}
	crc, err := strconv.ParseUint(strings.TrimSpace(s[i+len("crc32c "):]), 16, 32)
	if err != nil || uint32(crc) != crc32.Checksum([]byte(s[:i]), castagnoli) {
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

// AllocateProducerID hands out a new producer id for an idempotent producer
// (Kafka's InitProducerId): unique for the life of the data directory - in
// a cluster, of the cluster - and never reused.
func (b *Broker) AllocateProducerID(ctx context.Context) (int64, error) {
	if b.closed.Load() {
		return -1, ErrClosed
	}
	return b.pids.allocate(ctx)
}

// ProducerIDIssued reports whether id was ever handed out as a producer id
// (so that a producer may keep it under a new epoch, KIP-360).
func (b *Broker) ProducerIDIssued(id int64) bool { return b.pids.issued(id) }

package spool

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"

	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/partition"
)

// Creating partitions, all or nothing, and opening registered ones.
//
// The registry (topics.json) is the truth about which partitions exist: a
// partition directory it does not record in that place - topic name,
// number and topic ID - is a leftover, and Open removes it. Creation
// leans on that. It makes and opens the new partitions first, under the
// new topic ID, while the registry does not record them yet; only once
// they are all open and their directories durable does it write the
// registry, and only after that does it publish them. So:
//
//   - A failure before the registry write (a full disk while
//     allocating a new index, say) leaves a registry that never named the
//     partitions; their directories are removed at once, and the topic was
//     never visible.
//   - A crash before the registry write leaves directories the registry
//     does not record; the next Open removes them (removeLeftovers). A
//     directory is named for creation (<topic>-<n>.<id>-create) until its
//     partition.metadata is written, and only then renamed to its place,
//     so every <topic>-<n> directory made this way names its topic ID:
//     nothing of a creation is ever a directory without metadata, which
//     Open leaves alone.
//   - A crash after the registry write leaves a topic whose partitions all
//     exist, opened once already: the next Open opens them.
//   - A failed registry write is the one ambiguous case: the rename of
//     the new file may or may not have happened. commitRegistry reads the
//     file back, and writes the previous registry again if it has to,
//     before removing anything; if it cannot be sure, it leaves the
//     directories for the next Open (or the next creation of the same
//     partitions) to settle by the same rule.
//
// Registries written before this order (registry first, then partitions)
// may record partitions whose directories are missing: Open creates them.

// newPartitions creates and opens partitions [from, to) of t, which the
// registry does not record, under t's ID. Called with mu held, so no other
// creation or deletion runs. All or nothing: on an error every directory
// it made is removed again, and the partitions opened are closed.
func (b *Broker) newPartitions(t *topic, from, to int32) ([]*partition.Partition, error) {
	var made []*partition.Partition
	undo := func(upTo int32, err error) ([]*partition.Partition, error) {
		for _, p := range made {
			_ = p.Close()
		}
		b.removeNewPartitions(t, from, upTo)
		return nil, err
	}
	for i := from; i < to; i++ {
		dir := partitionDir(b.dir, t.name, i)
		if err := b.clearSlot(dir); err != nil {
			return undo(i, err) // what is in the way is not ours to remove
		}
		staging := b.stagingDir(t, i) // a new ID: nothing is there
		if err := b.fs.MkdirAll(staging, 0o755); err != nil {
			return undo(i+1, err)
		}
		if err := writePartitionMetaFS(b.fs, staging, t.id); err != nil {
			return undo(i+1, err)
		}
		if err := b.fs.Rename(staging, dir); err != nil {
			return undo(i+1, err)
		}
		p, err := b.openPartition(dir, t.name, i, partition.Options{Log: b.partitionLogOptions(t)})
		if err != nil {
			return undo(i+1, fmt.Errorf("open %s-%d: %w", t.name, i, err))
		}
		made = append(made, p)
	}
	// The renames must be durable before the registry names the
	// partitions: otherwise a crash could leave a registry recording
	// directories that are not there.
	if err := b.fs.SyncDir(b.dir); err != nil {
		return undo(to, err)
	}
	return made, nil
}

func (b *Broker) stagingDir(t *topic, n int32) string {
	return partitionDir(b.dir, t.name, n) + "." + t.id.String() + createSuffix
}

// clearSlot makes room for a new partition directory at dir, whose place
// the registry does not record (the caller holds mu and checked). What is
// there is removed if it is a leftover by removeLeftovers' rule - a
// partition directory whose metadata names a topic ID, which cannot be the
// registered one - or an empty directory. Anything else is in the way: it
// is not recognisably spool's, and is not removed.
func (b *Broker) clearSlot(dir string) error {
	st, err := os.Lstat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return err
	case !st.IsDir():
		return fmt.Errorf("%s is in the way: not a directory", dir)
	}
	if id, err := readPartitionMeta(dir); err == nil {
		b.logger.Info("removing a leftover partition directory before creating one in its place", "dir", dir, "topic_id", id)
		return os.RemoveAll(dir)
	}
	if err := os.Remove(dir); err != nil { // only an empty directory goes
		return fmt.Errorf("%s is in the way: a directory without %s that is not empty; move it aside", dir, partitionMetaFile)
	}
	return nil
}

// removeNewPartitions removes the directories of partitions [from, upTo)
// of t, which the registry does not record, and what creating them left.
// What cannot be removed is a leftover for the next Open.
func (b *Broker) removeNewPartitions(t *topic, from, upTo int32) {
	for i := from; i < upTo; i++ {
		for _, dir := range []string{partitionDir(b.dir, t.name, i), b.stagingDir(t, i)} {
			if err := os.RemoveAll(dir); err != nil {
				b.logger.Warn("could not remove the directory of a partition that was not created; the next Open removes it",
					"dir", dir, "err", err)
			}
		}
	}
	if err := b.fs.SyncDir(b.dir); err != nil {
		b.logger.Warn("could not make the removal of uncreated partitions durable; the next Open finishes it", "dir", b.dir, "err", err)
	}
}

// commitRegistry writes next, which records partitions [from, to) of t that
// newPartitions made (parts), over prev, which does not. If the write
// fails, the registry on disk must not record them before they may go: it
// is read back, and prev written again if it does (or cannot be read).
// Only if that fails too are the directories left - closed, unpublished,
// and settled by the next Open with whatever the registry then says.
func (b *Broker) commitRegistry(prev, next registry, t *topic, from, to int32, parts []*partition.Partition) error {
	err := writeRegistryFS(b.fs, b.dir, next)
	if err == nil {
		return nil
	}
	for _, p := range parts {
		_ = p.Close()
	}
	if onDisk, rerr := readRegistry(b.dir); rerr == nil && !onDisk.records(t.id, to) {
		b.removeNewPartitions(t, from, to)
		return err
	}
	if perr := writeRegistryFS(b.fs, b.dir, prev); perr != nil {
		b.logger.Error("could not tell whether the topic registry records partitions that failed to be created; leaving their directories for the next Open to settle",
			"topic", t.name, "partitions", fmt.Sprintf("%d-%d", from, to-1), "err", perr)
		return err
	}
	b.removeNewPartitions(t, from, to)
	return err
}

// creationFailed wraps the error of a creation of partitions [from, to)
// that changed nothing, and logs it: an operator sees why a topic did not
// appear even where the client shows no message.
func (b *Broker) creationFailed(what, topic string, from, to int32, err error) error {
	if errors.Is(err, ErrStorage) {
		return err
	}
	err = fmt.Errorf("%w: %s %q (partitions %d to %d): %w", ErrStorage, what, topic, from, to-1, err)
	b.logger.Warn("creation failed; nothing was created", "topic", topic, "from_partition", from, "to_partition", to-1, "err", err)
	return err
}

// openSlot is one registered partition for openRegisteredAll to open, and
// what opening it gave.
type openSlot struct {
	t   *topic
	n   int32
	p   *partition.Partition
	err error
}

// openWorkers bounds how many partitions Open opens at once. Opening one
// is mostly waiting - directory reads, an fsync, preallocating the
// active segment's indexes, a recovery scan after a crash - so a few per
// CPU keep the disk busy, and the bound keeps a broker with thousands of
// partitions from starting thousands of goroutines and opening thousands
// of files at the same moment.
func openWorkers() int { return min(32, 4*runtime.GOMAXPROCS(0)) }

// openRegisteredAll opens the partitions of slots with openRegistered, up
// to openWorkers at a time, and records in each slot what its open gave.
// It returns once every open has finished; what to do with a failure is
// the caller's, in slot order.
func (b *Broker) openRegisteredAll(slots []openSlot) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(openWorkers(), len(slots)) {
		wg.Go(func() {
			for i := range next {
				slots[i].p, slots[i].err = b.openRegistered(slots[i].t, slots[i].n)
			}
		})
	}
	for i := range slots {
		next <- i
	}
	close(next)
	wg.Wait()
}

// openRegistered opens partition n of t, which the registry records. A
// missing directory is made (a registry written before its partitions, by
// an older version, and a crash); one whose metadata names another topic
// ID is not opened: it is not this topic's data.
func (b *Broker) openRegistered(t *topic, n int32) (*partition.Partition, error) {
	dir := partitionDir(b.dir, t.name, n)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		b.logger.Warn("a registered partition has no directory; creating it empty", "dir", dir)
	}
	if err := b.fs.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	if id, err := readPartitionMeta(dir); errors.Is(err, os.ErrNotExist) {
		if err := writePartitionMetaFS(b.fs, dir, t.id); err != nil {
			return nil, err
		}
		if err := b.fs.SyncDir(b.dir); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, err
	} else if id != t.id {
		return nil, fmt.Errorf("spool: %s belongs to topic id %s, not %s's %s", dir, id, t.name, t.id)
	}
	p, err := b.openPartition(dir, t.name, n, partition.Options{Log: b.partitionLogOptions(t)})
	if err != nil {
		return nil, fmt.Errorf("spool: open %s-%d: %w", t.name, n, err)
	}
	return p, nil
}

// partitionLogOptions are the log options of t's partitions.
func (b *Broker) partitionLogOptions(t *topic) log.Options {
	lo := b.logOptions(b.effective(t.config()))
	if t.internal {
		lo.IndexMaxBytes = offsetsTopicIndexBytes // many small partitions
	}
	return lo
}

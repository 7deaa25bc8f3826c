package spool

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
)

// Checking a data directory without opening it. Open reads the registry,
// compares each registered partition's partition.metadata with it, opens
// the partitions, and removes what deleted topics left behind. CheckDataDir
// runs the same checks through the same functions (readRegistry,
// checkPartitionMeta, leftover, CheckTopicConfig), read-only, and reports
// every finding instead of stopping at the first, so that `spool check`
// fails exactly where Open would refuse.

// FindingLevel grades a Finding by what Open does about it.
type FindingLevel int

const (
	// FindingInfo is something Open deals with by itself, losing nothing:
	// a missing partition.metadata it writes from the registry, a deleted
	// topic's directory it finishes removing.
	FindingInfo FindingLevel = iota
	// FindingWarning is something Open goes on with but that an operator
	// may want to look at first: a registered partition without a
	// directory (Open creates it empty), a directory of a topic the
	// registry does not have (Open deletes it).
	FindingWarning
	// FindingRefusal is something Open refuses the data directory for.
	FindingRefusal
)

// String is "info", "warning" or "refusal".
func (l FindingLevel) String() string {
	switch l {
	case FindingInfo:
		return "info"
	case FindingWarning:
		return "warning"
	}
	return "refusal"
}

// Finding is one thing CheckDataDir found: the file or directory it is
// about, and a message saying what Open does with it and, where something
// needs doing, what to do.
type Finding struct {
	Level   FindingLevel
	Path    string
	Message string
}

// PartitionDir is a partition directory of a data directory.
type PartitionDir struct {
	Dir       string
	Topic     string
	Partition int32
	// Registered says that the registry lists the partition: Open opens
	// it. CheckDataDir lists unregistered partition directories only when
	// the registry cannot be read, since then which ones hold the data is
	// exactly what needs to be known.
	Registered bool
	// Replicated says that the directory is under ReplicasDir: a
	// clustered broker's replica of a replicated partition, opened when
	// the controller places it there, and never led at a fixed epoch.
	Replicated bool
}

// DataDirCheck is what CheckDataDir found.
type DataDirCheck struct {
	// Findings are in the order found: the registry, then each
	// partition directory.
	Findings []Finding
	// Partitions are the directories whose logs and partition files the
	// caller should check next: the registered partitions that exist (or,
	// when the registry cannot be read, every partition directory) and the
	// replicas under ReplicasDir, each in name order.
	Partitions []PartitionDir
}

// Refused reports whether Open would refuse the data directory for any of
// the findings.
func (c *DataDirCheck) Refused() bool {
	for _, f := range c.Findings {
		if f.Level == FindingRefusal {
			return true
		}
	}
	return false
}

func (c *DataDirCheck) add(level FindingLevel, path, format string, args ...any) {
	c.Findings = append(c.Findings, Finding{Level: level, Path: path, Message: fmt.Sprintf(format, args...)})
}

// CheckDataDir verifies what Open, with opts, verifies of the data
// directory dir before and after it opens the partitions' logs: that the
// topic registry (topics.json) reads back whole - its CRC, version, topic
// names and IDs - and that every topic's settings are ones its partitions
// can open with; that each registered partition's partition.metadata
// records the registry's topic ID; that a directory with partition
// directories has a registry at all; and what Open would create or delete.
// It changes nothing and takes no lock, so it can look at the directory of
// a running broker.
//
// It does not read the partitions' own files - the logs' segments and
// checkpoints (package log), the leader-epoch cache, high watermark and
// producer snapshots (package partition): the caller checks those in each
// of the returned Partitions, as `spool check` does. An error means dir
// itself cannot be read.
func CheckDataDir(dir string, opts Options) (DataDirCheck, error) {
	var c DataDirCheck
	opts, err := opts.withDefaults()
	if err != nil {
		return c, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	names, err := partitionDirNames(dir)
	if err != nil {
		return c, fmt.Errorf("spool: %w", err)
	}
	regPath := filepath.Join(dir, registryFile)
	reg, err := readRegistry(dir)
	switch {
	case errors.Is(err, os.ErrNotExist) && len(names) == 0:
		c.add(FindingInfo, regPath, "no topic registry yet: the broker writes an empty one when it first opens the directory")
	case errors.Is(err, os.ErrNotExist):
		c.add(FindingRefusal, regPath, "missing, but %s has partition directories (%s, ...): the broker refuses to guess which are data; "+
			"run \"spool repair %s\" to rebuild the registry from the partition directories", dir, names[0], dir)
		c.addAll(dir, names)
	case errors.Is(err, errBadRegistry):
		msgs := []string{err.Error()}
		var joined interface{ Unwrap() []error }
		if errors.As(err, &joined) {
			msgs = msgs[:0]
			for _, e := range joined.Unwrap() {
				msgs = append(msgs, e.Error())
			}
		}
		for _, m := range msgs {
			c.add(FindingRefusal, regPath, "%s: the broker refuses to open the directory; "+
				"run \"spool repair %s\" to rebuild the registry from the partition directories (topics' own settings are lost)", m, dir)
		}
		c.addAll(dir, names)
	case err != nil:
		c.add(FindingRefusal, regPath, "cannot read: %v", err)
		c.addAll(dir, names)
	default:
		c.checkTopics(dir, reg, names, opts)
	}

	entries, err := os.ReadDir(dir)
	if err != nil {
		return c, fmt.Errorf("spool: %w", err)
	}
	for _, e := range entries {
		if e.IsDir() && isDeletedDir(e.Name()) {
			c.add(FindingInfo, filepath.Join(dir, e.Name()), "a deleted topic's partition: the broker finishes removing it when it opens")
		}
	}
	return c, c.addReplicas(filepath.Join(dir, ReplicasDir))
}

// addAll lists every partition directory for checking: what to look at
// when the registry cannot say which ones are data.
func (c *DataDirCheck) addAll(dir string, names []string) {
	for _, name := range names {
		tn, n, _ := parsePartitionDir(name)
		c.Partitions = append(c.Partitions, PartitionDir{Dir: filepath.Join(dir, name), Topic: tn, Partition: n})
	}
}

// checkTopics checks the registered topics' settings and partition
// directories as Open's load and openPartitions would, then what
// removeLeftovers would do with the partition directories the registry
// does not list.
func (c *DataDirCheck) checkTopics(dir string, reg registry, names []string, opts Options) {
	regPath := filepath.Join(dir, registryFile)
	b := &Broker{dir: dir, opts: opts, logger: opts.Logger} // for CheckTopicConfig only: opens nothing
	byName := map[string]registryTopic{}
	registered := map[string]bool{}
	topics := append([]registryTopic(nil), reg.Topics...)
	sort.Slice(topics, func(i, j int) bool { return topics[i].Name < topics[j].Name })
	for _, rt := range topics {
		byName[rt.Name] = rt
		id, _ := ParseTopicID(rt.ID) // validated by readRegistry
		if err := b.CheckTopicConfig(fromStored(rt.Config, 0)); err != nil {
			c.add(FindingRefusal, regPath, "topic %q: its partitions cannot open with its settings (%v): the broker serves the others and keeps these OFFLINE; "+
				"move %s aside and run \"spool repair %s\" (topics' own settings are lost)", rt.Name, err, registryFile, dir)
		}
		if rt.Partitions == 0 {
			c.add(FindingWarning, regPath, "topic %q has no partitions (a creation that failed part way): nothing can be produced to it; delete it or add partitions", rt.Name)
		}
		for n := range rt.Partitions {
			p := partitionDir(dir, rt.Name, n)
			registered[filepath.Base(p)] = true
			st, err := os.Lstat(p)
			switch {
			case errors.Is(err, os.ErrNotExist):
				c.add(FindingWarning, p, "partition %d of topic %q has no directory: the broker creates it empty; "+
					"if it held records, they are gone unless restored before the broker opens", n, rt.Name)
				continue
			case err != nil:
				c.add(FindingRefusal, p, "cannot read: %v", err)
				continue
			case !st.IsDir():
				c.add(FindingRefusal, p, "not a directory, but the registry has partition %d of topic %q here: the broker keeps the partition OFFLINE; move the file away", n, rt.Name)
				continue
			}
			meta := filepath.Join(p, partitionMetaFile)
			missing, err := checkPartitionMeta(p, rt.Name, id)
			switch {
			case err != nil:
				c.add(FindingRefusal, meta, "%v: the broker keeps the partition OFFLINE. "+
					"If the directory is partition %d of topic %q, delete %s (the broker writes it again from the registry, topic id %s); "+
					"if the registry is what is wrong, move %s aside and run \"spool repair %s\"", err, n, rt.Name, partitionMetaFile, id, registryFile, dir)
			case missing:
				c.add(FindingInfo, meta, "missing: the broker writes it from the registry (topic id %s)", id)
			}
			c.Partitions = append(c.Partitions, PartitionDir{Dir: p, Topic: rt.Name, Partition: n, Registered: true})
		}
	}
	owned := func(tn string, n int32, id TopicID) bool {
		rt, ok := byName[tn]
		return ok && rt.ID == id.String() && n < rt.Partitions
	}
	for _, name := range names {
		if registered[name] {
			continue
		}
		p := filepath.Join(dir, name)
		remove, id, err := leftover(p, name, owned)
		switch {
		case err != nil:
			c.add(FindingWarning, p, "not a partition the registry lists, and without a readable %s (%v): the broker leaves it alone and never serves it", partitionMetaFile, err)
		case remove:
			c.add(FindingWarning, p, "its %s names topic id %s, which the registry does not have at this partition: the broker DELETES this directory as a deleted topic's remains. "+
				"If the topic should exist, do not start the broker: move %s aside and run \"spool repair %s\"", partitionMetaFile, id, registryFile, dir)
		}
	}
}

// addReplicas lists a clustered broker's replica directories.
func (c *DataDirCheck) addReplicas(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	for _, e := range entries {
		tn, n, ok := parsePartitionDir(e.Name())
		if !ok || !e.IsDir() {
			continue
		}
		c.Partitions = append(c.Partitions, PartitionDir{Dir: filepath.Join(dir, e.Name()), Topic: tn, Partition: n, Replicated: true})
	}
	return nil
}

package spool

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/spoolmq/spool/internal/vfs"
)

// Rebuilding the topic registry from the partition directories, for a data
// directory whose topics.json is lost or damaged: Open refuses such a
// directory rather than guess, and RebuildRegistry is the guess made
// explicit, by rules that never lose a record:
//
//   - A topic is every directory <topic>-<n> of the data directory. Its ID
//     is the one the partitions' partition.metadata files agree on. A
//     partition without partition.metadata joins its topic (Open then
//     writes the file); a topic none of whose partitions has one gets a
//     new ID.
//   - Its partition count is the number of its directories, which must be
//     numbered 0 to count-1. A registry with fewer partitions would make
//     Open delete the directories past them; one with more would invent
//     partitions. So a gap is not guessed at: creating the missing
//     directory (empty) says that partition's records are gone.
//   - Partitions that disagree on the topic ID, a partition.metadata that
//     cannot be read, and a directory name that is not a valid topic name
//     are not guessed at either. Any of them and nothing is written: a
//     registry that left a topic out would make Open delete that topic's
//     directories.
//   - Topics' own settings live only in the registry. The offsets topic
//     (__consumer_offsets) gets the settings the broker creates it with;
//     every other topic gets the broker's defaults except that it keeps
//     every record (retention.ms and retention.bytes -1, cleanup.policy
//     delete), so that no setting the rebuild had to invent deletes data.
//
// Nothing in the partition directories is written or removed.

// ErrRepairRefused means RebuildRegistry found a topic whose registry
// entry it cannot rebuild without guessing, and wrote nothing. The
// RegistryRepair's refusal findings say which and why.
var ErrRepairRefused = errors.New("spool: the topic registry cannot be rebuilt without guessing")

// RepairOptions configure RebuildRegistry.
type RepairOptions struct {
	// DryRun decides and reports without writing the registry or its
	// damaged copy. (The lock is still taken, which creates the data
	// directory's .lock file if it has none.)
	DryRun bool
	// Now stamps the rebuilt topics' creation time and the name of the
	// damaged registry's copy. Default time.Now.
	Now func() time.Time
}

// RepairedTopic is one topic of a rebuilt registry.
type RepairedTopic struct {
	Name       string
	ID         TopicID
	Partitions int32
	Internal   bool // the offsets topic, with its own settings
	// NewID says that no partition recorded the topic's ID, so the rebuild
	// made one up.
	NewID bool
}

// RegistryRepair is what RebuildRegistry found and did.
type RegistryRepair struct {
	// Intact says that the registry read back whole: nothing was done.
	Intact bool
	// Topics is the rebuilt registry, in name order.
	Topics []RepairedTopic
	// Findings are the decisions about single directories (info), what
	// the rebuilt registry cannot know (warnings), and, with
	// ErrRepairRefused, what could not be decided (refusals).
	Findings []Finding
	// Written says that the rebuilt registry replaced topics.json.
	Written bool
	// DamagedCopy is where the damaged registry's bytes were kept, if
	// there was one and it was written.
	DamagedCopy string
}

func (r *RegistryRepair) add(level FindingLevel, path, format string, args ...any) {
	r.Findings = append(r.Findings, Finding{Level: level, Path: path, Message: fmt.Sprintf(format, args...)})
}

// RebuildRegistry rebuilds the topic registry (topics.json) of the data
// directory dir from its partition directories, by the rules above, when
// it is missing or does not read back whole; an intact registry is left as
// it is. It takes the data directory's lock, so it fails with ErrLocked
// while a broker has the directory open. The new registry is written
// atomically, as the broker writes it, after the damaged one's bytes are
// copied aside (topics.json.damaged-<time>). When a topic cannot be
// rebuilt without guessing it writes nothing and returns ErrRepairRefused.
// A cluster node's data directory has no registry to rebuild (its topics
// are in the metadata log): it is refused with ErrInvalidConfig.
func RebuildRegistry(dir string, opts RepairOptions) (*RegistryRepair, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("spool: %s is not a directory", dir)
	}
	lk, err := vfs.Default.Lock(filepath.Join(dir, ".lock"))
	if err != nil {
		return nil, fmt.Errorf("spool: repair %s: %w", dir, err)
	}
	defer lk.Close()

	rep := &RegistryRepair{}
	regPath := filepath.Join(dir, registryFile)
	_, rerr := readRegistry(dir)
	switch {
	case rerr == nil:
		rep.Intact = true
		return rep, nil
	case errors.Is(rerr, os.ErrNotExist):
		if err := clusterNodeDirError(dir); err != nil {
			return nil, err // nothing to rebuild: a registry there would unmake the node
		}
		rep.add(FindingInfo, regPath, "missing: rebuilding it from the partition directories")
	case errors.Is(rerr, errBadRegistry):
		rep.add(FindingInfo, regPath, "%v: rebuilding it from the partition directories", rerr)
	default:
		return nil, fmt.Errorf("spool: %w", rerr)
	}

	names, err := partitionDirNames(dir)
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	type part struct {
		dir     string
		n       int32
		id      TopicID
		hasMeta bool
	}
	byTopic := map[string][]part{}
	for _, name := range names {
		tn, n, _ := parsePartitionDir(name)
		p := part{dir: filepath.Join(dir, name), n: n}
		id, err := readPartitionMeta(p.dir)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			rep.add(FindingRefusal, filepath.Join(p.dir, partitionMetaFile), "%v: cannot tell which topic incarnation the directory belongs to. "+
				"If it is partition %d of topic %q, delete the file (it then joins the topic); if it is not spool's, move the directory out of %s", err, n, tn, dir)
			continue
		default:
			p.id, p.hasMeta = id, true
		}
		byTopic[tn] = append(byTopic[tn], p)
	}

	now := opts.Now().UTC()
	reg := registry{Version: 1}
	topicNames := make([]string, 0, len(byTopic))
	for tn := range byTopic {
		topicNames = append(topicNames, tn)
	}
	sort.Strings(topicNames)
	for _, tn := range topicNames {
		parts := byTopic[tn]
		slices.SortFunc(parts, func(a, b part) int { return int(a.n) - int(b.n) })
		if err := ValidTopicName(tn); err != nil {
			rep.add(FindingRefusal, parts[0].dir, "%v: not a topic's partition directory; move it out of %s", err, dir)
			continue
		}
		ok := true
		for i, p := range parts {
			if p.n != int32(i) {
				rep.add(FindingRefusal, partitionDir(dir, tn, int32(i)), "topic %q has partition directories up to %d but not this one: "+
					"if that partition's records are gone, create the directory empty (mkdir) and run repair again; otherwise restore it", tn, parts[len(parts)-1].n)
				ok = false
				break
			}
		}
		var id TopicID
		var from string
		for _, p := range parts {
			switch {
			case !p.hasMeta:
			case id == TopicID{}:
				id, from = p.id, p.dir
			case p.id != id:
				rep.add(FindingRefusal, filepath.Join(p.dir, partitionMetaFile), "topic id %s, but %s has %s: partitions of different incarnations of topic %q; "+
					"move the directories that do not belong out of %s and run repair again", p.id, from, id, tn, dir)
				ok = false
			}
		}
		if !ok {
			continue
		}
		t := RepairedTopic{Name: tn, ID: id, Partitions: int32(len(parts)), Internal: tn == OffsetsTopic}
		if id == (TopicID{}) {
			t.ID, t.NewID = newTopicID(), true
			rep.add(FindingWarning, parts[0].dir, "no partition of topic %q records its id: it gets the new id %s", tn, t.ID)
		}
		for _, p := range parts {
			if !p.hasMeta {
				rep.add(FindingInfo, p.dir, "no %s: taken as partition %d of topic %q (the broker writes the file when it opens)", partitionMetaFile, p.n, tn)
			}
		}
		own := TopicConfig{RetentionTime: -1, RetentionBytes: -1, CleanupPolicy: CleanupDelete}
		if t.Internal {
			own = offsetsTopicConfig(0, 0)
		}
		rep.Topics = append(rep.Topics, t)
		reg.Topics = append(reg.Topics, registryTopic{Name: tn, ID: t.ID.String(), Partitions: t.Partitions,
			Config: toStored(own), Created: now, Internal: t.Internal})
	}
	for _, f := range rep.Findings {
		if f.Level == FindingRefusal {
			rep.Topics = nil
			return rep, fmt.Errorf("%w: nothing written", ErrRepairRefused)
		}
	}
	if len(reg.Topics) > 0 {
		var users []string
		for _, t := range rep.Topics {
			if !t.Internal {
				users = append(users, t.Name)
			}
		}
		if len(users) > 0 {
			rep.add(FindingWarning, regPath, "topics' own settings were only in the registry and are lost: %q keep every record "+
				"(retention.ms=-1, retention.bytes=-1, cleanup.policy=delete) and take the broker's defaults otherwise; "+
				"set their settings again (Kafka's AlterConfigs, e.g. kafka-configs --alter, against spool serve)", users)
		}
	}
	if err := reg.validate(); err != nil {
		return rep, fmt.Errorf("spool: rebuilt registry does not validate: %w", err) // a bug: the rules above admit only valid topics
	}
	if opts.DryRun {
		return rep, nil
	}
	if errors.Is(rerr, errBadRegistry) {
		old, err := os.ReadFile(regPath)
		if err != nil {
			return rep, fmt.Errorf("spool: %w", err)
		}
		rep.DamagedCopy = regPath + ".damaged-" + now.Format("20060102T150405.000000000Z")
		if err := vfs.WriteFileAtomic(vfs.Default, rep.DamagedCopy, old); err != nil {
			rep.DamagedCopy = ""
			return rep, fmt.Errorf("spool: keep the damaged registry: %w", err)
		}
	}
	if err := writeRegistry(dir, reg); err != nil {
		return rep, err
	}
	rep.Written = true
	return rep, nil
}

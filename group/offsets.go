package group

import (
	"maps"
	"slices"
	"time"
)

// This file holds the committed-offset decisions of a group; the
// Coordinator persists what they allow before applying it.

// validateCommit decides whether an OffsetCommit may proceed (Kafka's
// validateOffsetCommit and doCommitOffsets). A commit from a member of the
// current generation counts as a heartbeat.
func (g *classicGroup) validateCommit(now time.Time, req CommitRequest) error {
	if g.state == Dead {
		return ErrUnknownMemberID
	}
	if req.Generation < 0 && g.state == Empty {
		// An administrator, or a consumer outside group management.
		return nil
	}
	if req.Generation >= 0 || req.MemberID != "" || req.GroupInstanceID != "" {
		if err := g.validateMember(req.MemberID, req.GroupInstanceID); err != nil {
			return err
		}
		if req.Generation != g.generation {
			return ErrIllegalGeneration
		}
	} else if g.state != Empty {
		// Only members commit to a group that has them.
		return ErrUnknownMemberID
	}
	switch g.state {
	case Stable, PreparingRebalance:
		// During PreparingRebalance the previous generation may still
		// commit what it consumed; its heartbeats tell it to rejoin.
		m := g.members[req.MemberID]
		m.expires = now.Add(m.session)
		return nil
	case CompletingRebalance:
		// The member has its new generation but not yet its assignment.
		return ErrRebalanceInProgress
	}
	return nil
}

// checkCommitOffsets sorts a commit's partitions into those that may be
// stored and those refused, with their errors.
func (g *classicGroup) checkCommitOffsets(now time.Time, offsets map[TopicPartition]OffsetAndMetadata) ([]StoredOffset, map[TopicPartition]error) {
	results := make(map[TopicPartition]error, len(offsets))
	var accepted []StoredOffset
	for _, tp := range slices.SortedFunc(maps.Keys(offsets), compareTP) {
		o := offsets[tp]
		if len(o.Metadata) > g.cfg.maxMetadata {
			results[tp] = ErrOffsetMetadataTooLarge
			continue
		}
		o.CommitTime = now
		results[tp] = nil
		accepted = append(accepted, StoredOffset{TopicPartition: tp, OffsetAndMetadata: o})
	}
	return accepted, results
}

// applyOffsets makes stored records visible.
func (g *classicGroup) applyOffsets(records []StoredOffset) {
	t := &g.txn
	t.init()
	for _, r := range records {
		t.pos++
		if r.Delete {
			delete(g.offsets, r.TopicPartition)
			delete(t.written, r.TopicPartition)
		} else {
			g.offsets[r.TopicPartition] = r.OffsetAndMetadata
			t.written[r.TopicPartition] = t.pos
		}
	}
}

// deletions are the records removing the group's offsets for tps (those it
// has).
func (g *classicGroup) deletions(tps []TopicPartition) []StoredOffset {
	var out []StoredOffset
	for _, tp := range tps {
		if _, ok := g.offsets[tp]; ok {
			out = append(out, StoredOffset{TopicPartition: tp, Delete: true})
		}
	}
	return out
}

func (g *classicGroup) allOffsets() []TopicPartition {
	return slices.SortedFunc(maps.Keys(g.offsets), compareTP)
}

// expiredOffsets lists the offsets retention removes at now (Kafka's
// removeExpiredOffsets):
//   - a group that used group management and is now Empty loses all its
//     offsets once it has been Empty for retention;
//   - a group that never had members (offsets committed from outside
//     the group protocol, or loaded) loses each offset retention after it
//     was committed;
//   - a Stable consumer group loses offsets of topics none of its members
//     subscribes to, retention after they were committed.
func (g *classicGroup) expiredOffsets(now time.Time, retention time.Duration) []TopicPartition {
	var out []TopicPartition
	switch {
	case g.state == Empty && g.protocolType != "":
		if now.Sub(g.since) >= retention {
			out = g.allOffsets()
		}
	case g.state == Empty:
		for _, tp := range g.allOffsets() {
			if now.Sub(g.offsets[tp].CommitTime) >= retention {
				out = append(out, tp)
			}
		}
	case g.state == Stable && g.protocolType == ConsumerProtocolType && g.subscribedKnown:
		for _, tp := range g.allOffsets() {
			if !g.subscribed[tp.Topic] && now.Sub(g.offsets[tp].CommitTime) >= retention {
				out = append(out, tp)
			}
		}
	}
	return out
}

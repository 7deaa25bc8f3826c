package replica

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spoolmq/spool/log"
)

// fetcher is a follower's copy loop for one leader epoch.
type fetcher struct {
	leader int32
	epoch  int32
	cancel context.CancelFunc
	done   chan struct{}
}

func (r *ReplicaSet) startFetcher(leader, epoch int32) {
	ctx, cancel := context.WithCancel(context.Background())
	f := &fetcher{leader: leader, epoch: epoch, cancel: cancel, done: make(chan struct{})}
	r.leaderHW.Store(-1) // another leader, or epoch: nothing heard from it yet
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		cancel()
		return
	}
	r.fetcher = f
	r.mu.Unlock()
	go r.follow(ctx, f)
}

func (r *ReplicaSet) stopFetcher() {
	r.mu.Lock()
	f := r.fetcher
	r.fetcher = nil
	r.mu.Unlock()
	if f != nil {
		f.cancel()
		<-f.done
	}
}

// follow copies the leader's log: first it truncates by leader epoch to
// where the two logs agree, then it fetches from its log end, appends what
// it gets verbatim and takes the leader's high watermark (bounded by its own
// log end). Errors back off and retry; a divergence or a batch that does
// not follow on sends it back to truncation.
func (r *ReplicaSet) follow(ctx context.Context, f *fetcher) {
	defer close(f.done)
	link := r.node.net.Link(r.node.id, f.leader)
	cfg := &r.node.cfg
	backoff := time.Duration(0)
	fail := func(what string, err error) bool {
		if ctx.Err() != nil {
			return false
		}
		backoff = min(max(2*backoff, cfg.FetchBackoff/16, time.Millisecond), cfg.FetchBackoff)
		r.node.log.Debug("follower: "+what, "topic", r.topic, "partition", r.id, "leader", f.leader, "epoch", f.epoch, "err", err, "backoff", backoff)
		t := time.NewTimer(backoff)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	truncated := false
	for ctx.Err() == nil {
		if offset, damaged := r.part.Log().Damage(); damaged {
			if err := r.repair(offset); err != nil {
				if !fail("repair", err) {
					return
				}
				continue
			}
			truncated = false // agree on epochs again from the new end
		}
		if !truncated {
			if err := r.truncateToLeader(ctx, link, f); err != nil {
				if !fail("truncation", err) {
					return
				}
				continue
			}
			truncated = true
		}
		req := &FetchRequest{Topic: r.topic, Partition: r.id, ReplicaID: r.node.id, BrokerEpoch: r.node.BrokerEpoch(),
			FetchOffset: r.part.EndOffset(), CurrentLeaderEpoch: f.epoch, LastFetchedEpoch: r.part.Epochs().Latest(),
			MaxBytes: cfg.FetchMaxBytes, MaxWait: cfg.FetchMaxWait}
		resp, err := link.Fetch(ctx, req)
		var oor *OffsetOutOfRangeError
		if errors.As(err, &oor) {
			if req.FetchOffset < oor.LogStartOffset {
				// The leader deleted (retention, DeleteRecords) what
				// this replica would fetch next: nothing it holds is
				// in the leader's log any more. Start over at the
				// leader's log start (Kafka's truncateFullyAndStartAt).
				r.node.log.Info("follower: log ends before the leader's log start; emptying it and starting there",
					"topic", r.topic, "partition", r.id, "end", req.FetchOffset, "leader_log_start", oor.LogStartOffset)
				if serr := r.part.StartAt(oor.LogStartOffset); serr != nil {
					err = serr
				} else {
					continue
				}
			} else {
				truncated = false // past the leader's end: agree on epochs again
			}
		}
		if err != nil {
			if !fail("fetch", err) {
				return
			}
			continue
		}
		if resp.Diverging != nil {
			r.node.log.Info("follower: log diverges from the leader's", "topic", r.topic, "partition", r.id,
				"leader_epoch", resp.Diverging.Epoch, "leader_end", resp.Diverging.EndOffset)
			truncated = false
			continue
		}
		if len(resp.Records) > 0 {
			if _, err := r.part.AppendReplica(resp.Records); err != nil {
				if errors.Is(err, log.ErrOffsetMismatch) {
					truncated = false
				}
				if !fail("append", err) {
					return
				}
				continue
			}
		}
		backoff = 0
		r.leaderHW.Store(resp.HighWatermark)
		r.part.SetHighWatermark(min(resp.HighWatermark, r.part.EndOffset()))
		// The leader's log start moved (DeleteRecords, retention): follow
		// it as far as this replica's high watermark, so that deleted
		// records do not come back after a failover.
		if ls := min(resp.LogStartOffset, r.part.HighWatermark()); ls > r.part.StartOffset() {
			if err := r.part.Log().DeleteRecordsBefore(ls); err != nil && !fail("log start", err) {
				return
			}
		}
	}
}

// repair cuts the follower's log before a damaged batch that a read found
// (log.Log.Damage), and everything after it, to copy them again from the
// leader: going beyond Kafka, whose followers never look at their own
// copies. The cut may go below the high watermark; nothing is lost, as the
// leader holds those records, and the follower leaves the ISR until it has
// them again if it lags too long.
func (r *ReplicaSet) repair(offset int64) error {
	end := r.part.EndOffset()
	to, err := r.part.TruncateTo(offset)
	if err != nil {
		return fmt.Errorf("%s-%d: cutting the damaged batch at %d: %w", r.topic, r.id, offset, err)
	}
	r.node.repairs.Add(1)
	r.node.log.Warn("follower: cut a damaged batch and what follows from its log, to copy them again from the leader",
		"topic", r.topic, "partition", r.id, "offset", offset, "from", end, "to", to)
	return nil
}

// truncateToLeader cuts the follower's log to where it agrees with the
// leader's: OffsetsForLeaderEpoch for its latest epoch, repeated for older
// epochs while the leader answers with one the follower never had
// (DecideTruncation). Never to the high watermark (KIP-101).
func (r *ReplicaSet) truncateToLeader(ctx context.Context, link Link, f *fetcher) error {
	p := r.part
	if p.EndOffset() == p.StartOffset() && len(p.Epochs().Entries()) == 0 {
		return nil // nothing to keep or cut
	}
	ask := p.Epochs().Latest()
	for range 64 {
		ans, err := link.EndOffsetForEpoch(ctx, &EpochRequest{Topic: r.topic, Partition: r.id, ReplicaID: r.node.id,
			CurrentLeaderEpoch: f.epoch, Epoch: ask})
		if err != nil {
			return err
		}
		end := p.EndOffset()
		d := DecideTruncation(func(e int32) (int32, int64) { return p.Epochs().EndOffsetFor(e, end) },
			p.StartOffset(), end, ans.Epoch, ans.EndOffset)
		if to := max(d.Offset, p.StartOffset()); to < end {
			if hw := p.HighWatermark(); to < hw {
				r.node.truncatedCommitted.Add(hw - to)
				r.node.log.Warn("follower: truncating below the high watermark: records once committed are dropped (unclean leader election?)",
					"topic", r.topic, "partition", r.id, "to", to, "high_watermark", hw)
			}
			if _, err := p.TruncateTo(to); err != nil {
				return err
			}
			r.node.log.Info("follower: truncated", "topic", r.topic, "partition", r.id, "from", end, "to", to, "leader_epoch", ans.Epoch)
		}
		if d.Done {
			return nil
		}
		ask = d.NextEpoch
	}
	return fmt.Errorf("%s-%d: truncation did not converge", r.topic, r.id)
}

package log

// Changing the settings of an open log.
//
// Each setting Reconfigure changes is read only under a lock it takes:
//
//	RetentionTime, RetentionBytes               ApplyRetention, under cpMu and mu (lockState)
//	SegmentAge                                  maybeRoll and RollIfOld, under mu
//	SegmentBytes                                maybeRoll under mu; groupSegments under cleanMu
//	DeleteRetention, Min/MaxCompactionLag,
//	MinCleanableDirtyRatio                      Clean, under cleanMu
//
// so Reconfigure takes cleanMu, cpMu and mu, in Clean's order. The other
// settings are read without a lock on the append path (MaxMessageBytes,
// Compression) or before one (Cleanup), so they are fixed while the log is
// open.

// Check reports whether Open would accept o: sizes in range, a known codec
// and cleanup policy, a dirty ratio in [0, 1] and so on.
func (o Options) Check() error {
	_, err := o.withDefaults()
	return err
}

// Reconfigure changes the settings of the open log that may change while it
// runs - SegmentBytes, SegmentAge, RetentionTime, RetentionBytes,
// DeleteRetention, MinCompactionLag, MaxCompactionLag and
// MinCleanableDirtyRatio - to those of o, zero fields taking their defaults
// as in Open. The other fields of o are ignored: they take effect when the
// log is next opened. It waits for a Clean in progress. A new SegmentBytes
// or SegmentAge applies from the next append or RollIfOld (a larger active
// segment rolls then), new retention from the next ApplyRetention.
func (l *Log) Reconfigure(o Options) error {
	l.cleanMu.Lock()
	defer l.cleanMu.Unlock()
	defer l.lockState()()
	if l.closed.Load() {
		return ErrClosed
	}
	n := l.opts
	n.SegmentBytes, n.SegmentAge = o.SegmentBytes, o.SegmentAge
	n.RetentionTime, n.RetentionBytes = o.RetentionTime, o.RetentionBytes
	n.DeleteRetention, n.MinCompactionLag, n.MaxCompactionLag = o.DeleteRetention, o.MinCompactionLag, o.MaxCompactionLag
	n.MinCleanableDirtyRatio = o.MinCleanableDirtyRatio
	n, err := n.withDefaults()
	if err != nil {
		return err
	}
	l.opts.SegmentBytes, l.opts.SegmentAge = n.SegmentBytes, n.SegmentAge
	l.opts.RetentionTime, l.opts.RetentionBytes = n.RetentionTime, n.RetentionBytes
	l.opts.DeleteRetention, l.opts.MinCompactionLag, l.opts.MaxCompactionLag = n.DeleteRetention, n.MinCompactionLag, n.MaxCompactionLag
	l.opts.MinCleanableDirtyRatio = n.MinCleanableDirtyRatio
	return nil
}

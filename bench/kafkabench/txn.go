package kafkabench

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Dial is a Target for a broker that is already running at addr - a
// `spool serve` process, say; its Close does nothing.
func Dial(name, addr string) *Target {
	return &Target{Name: name, Addr: addr, stop: func() error { return nil }}
}

// Commits says when ProduceTxn commits its transaction: after Every
// records, or once Interval has passed since the transaction began,
// whichever comes first (a zero field never triggers).
type Commits struct {
	Every    int
	Interval time.Duration
}

// String names the policy as the benchmark's tables do.
func (c Commits) String() string {
	switch {
	case c.Every > 0 && c.Interval > 0:
		return fmt.Sprintf("every %d records or %v", c.Every, c.Interval)
	case c.Every > 0:
		return fmt.Sprintf("every %d records", c.Every)
	default:
		return fmt.Sprintf("every %v", c.Interval)
	}
}

// TxnResult is what one ProduceTxn run measured.
type TxnResult struct {
	Took         time.Duration // first Produce call to the last commit's return
	Transactions int           // transactions committed in that time
}

// ProduceTxn produces n records of size bytes to topic as kgo's
// transactional producer (transactional id txnID; acks=all and idempotent,
// as transactions require) and commits a transaction as commits says:
// BeginTransaction, asynchronous Produce calls as in Produce, then Flush
// (kgo's EndTransaction needs every record acknowledged first) and
// EndTransaction(TryCommit). It returns the time from the first Produce
// call to the last commit's return. One warm-up record is produced and
// committed first, not timed, so that the producer id, the coordinator and
// the connections are in place; the records are Produce's (Consume reads
// either).
func ProduceTxn(ctx context.Context, t *Target, topic, txnID string, n, size int, commits Commits) (TxnResult, error) {
	var res TxnResult
	if commits.Every <= 0 && commits.Interval <= 0 {
		return res, errors.New("kafkabench: ProduceTxn needs a commit policy")
	}
	cl, err := t.client(kgo.DefaultProduceTopic(topic), kgo.TransactionalID(txnID))
	if err != nil {
		return res, err
	}
	defer cl.Close()
	commit := func() error {
		if err := cl.Flush(ctx); err != nil {
			return err
		}
		return cl.EndTransaction(ctx, kgo.TryCommit)
	}
	if err := cl.BeginTransaction(); err != nil {
		return res, err
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("warm-up")}).FirstErr(); err != nil {
		return res, fmt.Errorf("warm-up produce: %w", err)
	}
	if err := commit(); err != nil {
		return res, fmt.Errorf("warm-up commit: %w", err)
	}

	vals := NewValues(size)
	var failed atomic.Pointer[error]
	var acked atomic.Int64
	cb := func(_ *kgo.Record, err error) {
		if err != nil {
			failed.CompareAndSwap(nil, &err)
		}
		acked.Add(1)
	}
	start := time.Now()
	for i := 0; i < n; {
		if err := cl.BeginTransaction(); err != nil {
			return res, err
		}
		// A timer marks the transaction due, so that the loop reads an
		// atomic rather than the clock for every record.
		var due atomic.Bool
		var timer *time.Timer
		if commits.Interval > 0 {
			timer = time.AfterFunc(commits.Interval, func() { due.Store(true) })
		}
		for k := 0; i < n; {
			cl.Produce(ctx, &kgo.Record{Value: vals.Value(i)}, cb)
			i++
			k++
			if (commits.Every > 0 && k >= commits.Every) || due.Load() {
				break
			}
		}
		if timer != nil {
			timer.Stop()
		}
		if err := commit(); err != nil {
			return res, fmt.Errorf("commit after %d records: %w", i, err)
		}
		res.Transactions++
	}
	res.Took = time.Since(start)
	if p := failed.Load(); p != nil {
		return res, *p
	}
	if got := acked.Load(); got != int64(n) {
		return res, fmt.Errorf("%d of %d records acknowledged", got, n)
	}
	return res, nil
}

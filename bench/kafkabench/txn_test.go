package kafkabench

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ProduceTxn commits as its policy says - by count, by time - and what it
// committed is what a read_committed consumer reads; a missing policy is
// refused.
func TestProduceTxn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tg, err := Start("spool", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := tg.Close(); err != nil {
			t.Error(err)
		}
	}()
	if err := tg.CreateTopic(ctx, "txn", 3); err != nil {
		t.Fatal(err)
	}
	res, err := ProduceTxn(ctx, tg, "txn", "txn-count", 1050, 100, Commits{Every: 100})
	if err != nil {
		t.Fatal(err)
	}
	if res.Transactions != 11 || res.Took <= 0 {
		t.Errorf("1050 records committed every 100: %+v, want 11 transactions", res)
	}
	if _, err := Consume(ctx, tg, "txn", 1050, 100, kgo.FetchIsolationLevel(kgo.ReadCommitted())); err != nil {
		t.Errorf("read_committed: %v", err)
	}

	if err := tg.CreateTopic(ctx, "txn-time", 1); err != nil {
		t.Fatal(err)
	}
	// A transaction not yet due when the records run out is committed
	// with them.
	res, err = ProduceTxn(ctx, tg, "txn-time", "txn-time", 20, 100, Commits{Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if res.Transactions != 1 {
		t.Errorf("20 records committed every hour: %d transactions, want 1", res.Transactions)
	}
	if _, err := Consume(ctx, tg, "txn-time", 20, 100, kgo.FetchIsolationLevel(kgo.ReadCommitted())); err != nil {
		t.Errorf("read_committed: %v", err)
	}
	if _, err := ProduceTxn(ctx, tg, "txn-time", "txn-none", 1, 100, Commits{}); err == nil {
		t.Error("ProduceTxn without a commit policy: no error")
	}
}

package spool

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestFlushReportsFailuresWithoutCallback produces records that fail - to
// an unknown topic, and batches past their DeliveryTimeout - with a nil
// callback: Flush reports them, counted, with the first error wrapped; the
// next Flush, with nothing failed since, returns nil.
func TestFlushReportsFailuresWithoutCallback(t *testing.T) {
	b := openBroker(t, t.TempDir(), Options{AutoCreateTopics: Disabled})
	t.Cleanup(func() { b.Close() })
	ctx := context.Background()
	require.NoError(t, b.CreateTopic(ctx, "t", TopicConfig{}))

	p, err := b.NewProducer(ProducerConfig{})
	require.NoError(t, err)
	for range 3 {
		p.Produce(ctx, Record{Topic: "missing", Value: []byte("v")}, nil)
	}
	err = p.Flush(ctx)
	require.ErrorIs(t, err, ErrUnknownTopic)
	require.ErrorContains(t, err, "3 records failed since the last Flush; the first: ")

	p.Produce(ctx, Record{Topic: "t", Value: []byte("v")}, nil)
	require.NoError(t, p.Flush(ctx), "nothing failed since the last Flush")
	require.NoError(t, p.Close())

	// Failures found by the sender, after Produce returned; Close reports
	// them as Flush does.
	p, err = b.NewProducer(ProducerConfig{Linger: 50 * time.Millisecond, DeliveryTimeout: time.Millisecond})
	require.NoError(t, err)
	p.Produce(ctx, Record{Topic: "t", Value: []byte("late")}, nil)
	p.Produce(ctx, Record{Topic: "t", Value: []byte("late")}, nil)
	time.Sleep(5 * time.Millisecond) // past DeliveryTimeout before the batch is written
	err = p.Close()
	require.ErrorIs(t, err, ErrDeliveryTimeout)
	require.ErrorContains(t, err, "2 records failed since the last Flush")
}

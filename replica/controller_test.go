package replica

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// blockingMember holds the controller's delivery to it inside
// UpdatePartition until release is closed.
type blockingMember struct {
	entered chan struct{}
	release chan struct{}
}

func (m *blockingMember) UpdatePartition(PartitionState) {
	select {
	case m.entered <- struct{}{}:
	default:
	}
	<-m.release
}

func (m *blockingMember) LogEnd(string, int32) (int32, int64, bool) { return 0, 0, false }

// TestLocalControllerCloseJoinsDeliveries checks that Close returns only
// once each member's delivery goroutine has ended: one in the middle of an
// UpdatePartition is waited for, not left running.
func TestLocalControllerCloseJoinsDeliveries(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c := NewLocalController(ControllerConfig{})
	m := &blockingMember{entered: make(chan struct{}, 1), release: make(chan struct{})}
	ctx := context.Background()
	_, err := c.Register(ctx, 1, m)
	require.NoError(t, err)
	_, err = c.CreateTopic(ctx, TopicSpec{Name: "t", Partitions: 1, ReplicationFactor: 1})
	require.NoError(t, err)
	<-m.entered // the delivery is inside UpdatePartition

	closed := make(chan struct{})
	go func() {
		c.Close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("Close returned while a delivery was still running")
	case <-time.After(50 * time.Millisecond):
	}
	close(m.release)
	<-closed
}

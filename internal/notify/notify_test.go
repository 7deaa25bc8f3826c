package notify

import (
	"sync"
	"testing"
	"time"
)

func TestBroadcastWakesEveryWaiter(t *testing.T) {
	var n Notifier
	n.Broadcast() // no waiters: nothing to do
	var wg sync.WaitGroup
	for range 10 {
		ch := n.Wait()
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-ch:
			case <-time.After(10 * time.Second):
				t.Error("not woken")
			}
		}()
	}
	n.Broadcast()
	wg.Wait()
	select {
	case <-n.Wait():
		t.Fatal("a new wait must not see the old broadcast")
	default:
	}
}

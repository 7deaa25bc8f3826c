// Package notify is a broadcast for goroutines waiting for something to
// change: a log's end, a high watermark, a replica's role.
package notify

import (
	"sync"
	"sync/atomic"
)

// Notifier wakes every waiter at once. Waiters take a channel that the next
// Broadcast closes; take it before checking the condition, or a broadcast
// in between is missed. A Broadcast with no waiters allocates nothing and
// takes no lock, so hot paths may call it freely. The zero value is ready.
type Notifier struct {
	mu      sync.Mutex
	ch      chan struct{}
	waiting atomic.Bool
}

// Wait returns a channel closed by the next Broadcast.
func (n *Notifier) Wait() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch == nil {
		n.ch = make(chan struct{})
	}
	n.waiting.Store(true)
	return n.ch
}

// Broadcast closes the channel the waiters hold.
func (n *Notifier) Broadcast() {
	if !n.waiting.Load() {
		return
	}
	n.mu.Lock()
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
	}
	n.waiting.Store(false)
	n.mu.Unlock()
}

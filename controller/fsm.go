package controller

import (
	"encoding/json"
	"io"
	"log/slog"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"github.com/spoolmq/spool/internal/notify"
)

// fsm is the Raft state machine: the image of the committed metadata log.
// Raft calls Apply for committed entries in order, from one goroutine; the
// image is published atomically, so readers take no lock.
type fsm struct {
	img     atomic.Pointer[Image]
	changed notify.Notifier
	log     *slog.Logger
}

func newFSM(lg *slog.Logger) *fsm {
	f := &fsm{log: lg}
	f.img.Store(NewImage())
	return f
}

func (f *fsm) image() *Image { return f.img.Load() }

// Apply implements raft.FSM. An entry that does not decode changes nothing
// but the index, on every node alike (the leader that wrote it is told).
func (f *fsm) Apply(l *raft.Log) any {
	cur := f.img.Load()
	e, err := DecodeEntry(l.Data)
	if err != nil {
		f.log.Error("metadata entry does not decode; skipped", "index", l.Index, "err", err)
		next := *cur
		next.index = l.Index
		f.img.Store(&next)
		f.changed.Broadcast()
		return err
	}
	next, res := cur.apply(e, l.Index)
	f.img.Store(next)
	f.changed.Broadcast()
	return res
}

// Snapshot implements raft.FSM: the image as JSON.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) { return imageSnapshot{f.img.Load()}, nil }

// Restore implements raft.FSM.
func (f *fsm) Restore(r io.ReadCloser) error {
	defer r.Close()
	var im Image
	if err := json.NewDecoder(r).Decode(&im); err != nil {
		return err
	}
	f.img.Store(&im)
	f.changed.Broadcast()
	return nil
}

type imageSnapshot struct{ im *Image }

func (s imageSnapshot) Persist(sink raft.SnapshotSink) error {
	data, err := json.Marshal(s.im)
	if err == nil {
		_, err = sink.Write(data)
	}
	if err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (imageSnapshot) Release() {}

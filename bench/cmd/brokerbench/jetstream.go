package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const (
	streamName    = "BENCH"
	streamSubject = "bench"
	// jsMaxPending is the publish window: acknowledgements outstanding.
	jsMaxPending = 4096
)

func natsServerVersion() string { return server.VERSION }
func natsClientVersion() string { return nats.Version }

// jetStreamSystem is NATS JetStream embedded: nats-server run in this
// process with JetStream on, file storage in the run's directory, one stream
// of one subject with one replica; nats.go connected in-process (or over
// loopback TCP) publishes with PublishAsync and a window of jsMaxPending
// acknowledgements, then an ordered consumer replays the stream.
//
// Durability: under sync the server runs with sync_interval "always"
// (Options.SyncAlways: the message block is fsynced after every write); under
// none with its default, an fsync every 2 minutes.
type jetStreamSystem struct {
	conn     string // "inprocess" or "tcp"
	consumer string // "pull" (jetstream.OrderedConsumer) or "push" (nats.OrderedConsumer)
	pullMax  int    // PullMaxMessages of the pull consumer; 0: the default (500)
}

func (j *jetStreamSystem) name() string { return "jetstream" }

func (j *jetStreamSystem) run(ctx context.Context, dir string, c cell) (res result, err error) {
	opts := &server.Options{
		ServerName: "brokerbench",
		JetStream:  true,
		StoreDir:   dir,
		SyncAlways: c.sync(),
		NoLog:      true,
		NoSigs:     true,
		// Limits: well above what a run writes.
		JetStreamMaxMemory: 1 << 30,
		JetStreamMaxStore:  64 << 30,
	}
	if j.conn == "tcp" {
		opts.Host, opts.Port = "127.0.0.1", server.RANDOM_PORT
	} else {
		opts.DontListen = true
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return result{}, err
	}
	go s.Start()
	defer func() {
		s.Shutdown()
		s.WaitForShutdown()
	}()
	if !s.ReadyForConnections(10 * time.Second) {
		return result{}, errors.New("nats-server not ready after 10s")
	}
	var nc *nats.Conn
	if j.conn == "tcp" {
		nc, err = nats.Connect(s.ClientURL())
	} else {
		nc, err = nats.Connect("", nats.InProcessServer(s))
	}
	if err != nil {
		return result{}, err
	}
	defer nc.Close()

	var mu sync.Mutex
	var pubErr error
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(jsMaxPending),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *nats.Msg, err error) {
			mu.Lock()
			if pubErr == nil {
				pubErr = err
			}
			mu.Unlock()
		}))
	if err != nil {
		return result{}, err
	}
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:     streamName,
		Subjects: []string{streamSubject},
		Storage:  jetstream.FileStorage,
		Replicas: 1,
	})
	if err != nil {
		return result{}, err
	}
	res.records = c.records

	// Publish: asynchronous with a window of jsMaxPending, then wait for
	// every acknowledgement.
	src := newValueSource(c.size)
	start := time.Now()
	for i := range c.records {
		// A value of its own: the client keeps the message until it is
		// acknowledged (to retry it), so the buffer cannot be reused.
		val := make([]byte, c.size)
		src.fill(val, i)
		for {
			_, err := js.PublishAsync(streamSubject, val)
			if err == nil {
				break
			}
			if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) { // the window stayed full 200 ms
				return result{}, fmt.Errorf("publish %d: %w", i, err)
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(5 * time.Minute):
		return result{}, fmt.Errorf("publish: %d acknowledgements missing after 5 minutes", js.PublishAsyncPending())
	}
	res.publish = time.Since(start)
	mu.Lock()
	err = pubErr
	mu.Unlock()
	if err != nil {
		return result{}, fmt.Errorf("publish: %w", err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return result{}, err
	}
	if info.State.Msgs != uint64(c.records) {
		return result{}, fmt.Errorf("stream holds %d messages, want %d", info.State.Msgs, c.records)
	}

	// Replay: an ordered consumer from the first message.
	done := make(chan error, 1)
	n := 0
	handle := func(data []byte) {
		if n >= c.records {
			return
		}
		if err := checkValue(data, n, c.size); err != nil {
			n = c.records
			done <- err
			return
		}
		n++
		if n == c.records {
			done <- nil
		}
	}
	start = time.Now()
	if j.consumer == "push" {
		// nats.go's original JetStream API: an ordered push consumer
		// (flow control and heartbeats on).
		jsc, err := nc.JetStream()
		if err != nil {
			return result{}, err
		}
		sub, err := jsc.Subscribe(streamSubject, func(m *nats.Msg) { handle(m.Data) }, nats.OrderedConsumer(), nats.DeliverAll())
		if err != nil {
			return result{}, err
		}
		defer sub.Unsubscribe()
	} else {
		// The jetstream package's ordered consumer: pull requests of
		// PullMaxMessages, reissued at half.
		cons, err := js.OrderedConsumer(ctx, streamName, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
		if err != nil {
			return result{}, err
		}
		var opts []jetstream.PullConsumeOpt
		if j.pullMax > 0 {
			opts = append(opts, jetstream.PullMaxMessages(j.pullMax))
		}
		cc, err := cons.Consume(func(m jetstream.Msg) { handle(m.Data()) }, opts...)
		if err != nil {
			return result{}, err
		}
		defer cc.Stop()
	}
	select {
	case err = <-done:
	case <-time.After(5 * time.Minute):
		err = errors.New("replay: not done after 5 minutes")
	}
	res.replay = time.Since(start)
	return res, err
}

package log_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/record"
)

// Append records, read them back as batches, and decode them.
func ExampleOpen() {
	dir, _ := os.MkdirTemp("", "log-example-")
	defer os.RemoveAll(dir)

	l, err := log.Open(dir, log.Options{}) // Sync: appends are durable on return
	if err != nil {
		panic(err)
	}
	defer l.Close()
	first, _ := l.Append(record.Record{Value: []byte("one")}, record.Record{Value: []byte("two")})
	l.Append(record.Record{Value: []byte("three")})

	buf, err := l.Read(first, 1<<20)
	if err != nil {
		panic(err)
	}
	for len(buf) > 0 {
		b, n, _ := record.ParseBatch(buf)
		recs, _ := b.Records()
		for _, r := range recs {
			fmt.Println(r.Offset, string(r.Value))
		}
		buf = buf[n:]
	}
	fmt.Println("end offset", l.EndOffset())
	// Output:
	// 0 one
	// 1 two
	// 2 three
	// end offset 3
}

// A Reader follows the log from an offset, waiting for new batches.
func ExampleLog_NewReader() {
	dir, _ := os.MkdirTemp("", "log-example-")
	defer os.RemoveAll(dir)
	l, _ := log.Open(dir, log.Options{Flush: log.None})
	defer l.Close()

	r := l.NewReader(0)
	go l.Append(record.Record{Value: []byte("hello")})
	b, err := r.Next(context.Background()) // blocks until the append lands
	if err != nil {
		panic(err)
	}
	recs, _ := b.Records()
	fmt.Println(recs[0].Offset, string(recs[0].Value))
	// Output: 0 hello
}

// Many logs share one Scheduler: their interval flushes, checkpoints and
// retention run on its timer goroutine and few workers, not on a goroutine
// of each log. Close the logs, then the scheduler.
func ExampleScheduler() {
	root, _ := os.MkdirTemp("", "log-example-")
	defer os.RemoveAll(root)

	s := log.NewScheduler(0) // the default number of workers
	defer s.Close()
	var logs []*log.Log
	for i := range 3 {
		l, err := log.Open(filepath.Join(root, fmt.Sprint("p", i)), log.Options{
			Flush:     log.Interval(10 * time.Millisecond), // fsynced by the scheduler
			Scheduler: s,
		})
		if err != nil {
			panic(err)
		}
		logs = append(logs, l)
		l.Append(record.Record{Value: []byte("v")})
	}
	for _, l := range logs {
		fmt.Println(l.EndOffset(), l.Close())
	}
	// Output:
	// 1 <nil>
	// 1 <nil>
	// 1 <nil>
}

package controller_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"
	"github.com/spoolmq/spool/controller"
)

// The Raft log of a node, in __cluster_metadata-0/ as KRaft lays it out.
// Raft calls these methods itself (raft.NewRaft(conf, fsm, logs, stable,
// snaps, trans)); they are called directly here to show what the store
// keeps.
func ExampleOpenLogStore() {
	data, _ := os.MkdirTemp("", "raftstore-example-")
	defer os.RemoveAll(data)

	logs, err := controller.OpenLogStore(filepath.Join(data, "__cluster_metadata-0"), controller.LogStoreOptions{})
	if err != nil {
		panic(err)
	}
	defer logs.Close()

	// Entries 1..3, two terms: on disk, two batches (offsets 0..1, term 1;
	// offset 2, term 2), fsynced before StoreLogs returns.
	logs.StoreLogs([]*raft.Log{
		{Index: 1, Term: 1, Type: raft.LogConfiguration, Data: []byte("voters 1,2,3")},
		{Index: 2, Term: 1, Type: raft.LogNoop},
		{Index: 3, Term: 2, Type: raft.LogCommand, Data: []byte("create topic orders")},
	})

	// After a snapshot at index 2, Raft deletes the head.
	logs.DeleteRange(1, 2)
	first, _ := logs.FirstIndex()
	last, _ := logs.LastIndex()
	var e raft.Log
	logs.GetLog(3, &e)
	fmt.Println("entries", first, "to", last)
	fmt.Printf("index %d term %d %s %q\n", e.Index, e.Term, e.Type, e.Data)
	fmt.Println(logs.GetLog(1, &e) == raft.ErrLogNotFound)
	// Output:
	// entries 3 to 3
	// index 3 term 2 LogCommand "create topic orders"
	// true
}

// The term and vote of a node, beside its Raft log as KRaft keeps its
// quorum-state.
func ExampleOpenStableStore() {
	dir, _ := os.MkdirTemp("", "raftstore-example-")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, controller.QuorumStateFile)

	stable, err := controller.OpenStableStore(path)
	if err != nil {
		panic(err)
	}
	vote, _ := stable.Get([]byte("LastVoteCand"))
	fmt.Println("never voted:", vote == nil)
	stable.SetUint64([]byte("CurrentTerm"), 2) // on disk when it returns
	stable.Set([]byte("LastVoteCand"), []byte("node-1"))

	stable, _ = controller.OpenStableStore(path) // as after a restart
	term, _ := stable.GetUint64([]byte("CurrentTerm"))
	vote, _ = stable.Get([]byte("LastVoteCand"))
	fmt.Println("term", term, "voted for", string(vote))
	// Output:
	// never voted: true
	// term 2 voted for node-1
}

// Package clustertest runs a spool cluster of real processes for tests:
// N "spool serve" nodes on this machine, each with its own data directory
// and ports, that a test drives with a Kafka client (franz-go) and hurts
// with signals - the faults a cluster exists to survive, dealt by the
// operating system rather than imitated.
//
// # The cluster
//
// Start (or New, then StartAll) runs the nodes: ids 1 to N, every one a
// voter of the controller quorum unless Options.Voters says fewer, each
// started with
//
//	spool serve --data DIR/nodeID --node-id ID --listen HOST:PORT \
//	    --controller-listen HOST:PORT --controller-quorum-voters 1@...,2@...,3@... \
//	    --session-timeout 1s [Options.Args] [Options.NodeArgs(ID)]
//
// and waits until each prints "spool: serving on" and every node lists
// every other as a broker. The binary is $SPOOL_BIN, or is built once per
// test binary from the spool module the test's module requires, with that
// module's own dependencies (and with -race if the test binary has it);
// call Main from TestMain to remove it afterwards. Ports
// are chosen once, below the kernel's ephemeral range, and kept across
// restarts. When the test ends every node is killed; a node that ended on
// its own (a crash, a panic) fails the test, as does a data race a node
// built with -race reported, and a failed test logs the end of each node's
// stderr. Set $SPOOL_CLUSTERTEST_DIR to keep the data
// directories and whole logs - with the goroutine stacks of the nodes still
// running when the test failed - and $SPOOL_CLUSTERTEST_VERBOSE to see the
// nodes' stderr as they write it.
//
// # Faults
//
// Each Node is one process and its restarts: Kill (SIGKILL: a crash), Stop
// (SIGTERM: spool serve's controlled shutdown; returns the exit code),
// Start (again: same data directory, same ports), Pause and Resume
// (SIGSTOP, SIGCONT: a process that hangs with its sockets open). Faults of
// the network between nodes - cut, slow or one-way links - are for a proxy
// in front of each node's listeners: a Node keeps the addresses it binds
// apart from the ones it advertises for that purpose.
//
// # Asking the cluster
//
// The cluster is asked what any Kafka client could ask, over the Kafka
// protocol: Leader and Partitions (Metadata, the freshest answer among the
// running nodes), Controller (DescribeCluster, all nodes agreeing),
// Coordinator and CommittedOffsets (FindCoordinator, OffsetFetch from the
// coordinator), EndOffsets (ListOffsets from each leader), and WaitInSync
// for a healed cluster. Node.Request sends any kmsg request to one node.
// Client gives a franz-go client seeded with the running nodes. Queries
// that depend on news spreading after a fault return ErrUnsettled or a
// retriable Kafka error until it has: wait for them with Eventually.
//
// # Checking
//
// A Ledger records what a producer sent and what was acknowledged, and
// Check compares records read back with it: acknowledged records lost,
// read twice or at another offset, offsets not dense, values never sent.
// Node.ReadReplica reads a stopped node's copy of a partition from its
// files ("spool dump"), to check that replicas converged.
//
// Starting processes takes seconds: tests that use this package should
// skip under -short, as this package's own do.
package clustertest

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
// (SIGSTOP, SIGCONT: a process that hangs with its sockets open).
//
// With Options.LinkProxies, every connection a node opens to another node
// - Raft, registration and heartbeats, AlterPartition, followers' fetches
// - goes through a TCP proxy the test controls, one per ordered pair of
// nodes and listener (a Link; each node is started with "--dial-map"
// naming its own). A link can be cut, blocked one way or slowed, on the
// connections already open as well as on new ones: Cluster.Partition,
// Isolate, BlockOneWay, Slow, HealNetwork. A blocked direction holds its
// bytes, as TCP does through a partition, and delivers them on the heal;
// a one-way block lets a node's requests through and holds the answers,
// or the reverse. Clients reach the nodes directly: an isolated leader
// still hears its producers.
//
// With Options.DiskBytes every node's data directory is a tmpfs of its
// own (root only: DiskSupported says whether this machine allows it), and
// Node.FillDisk makes it full - ENOSPC for every write that needs a block
// - until FreeDisk.
//
// A Nemesis deals one fault and heals it: Kill, Pause, Isolate,
// Partition, OneWay, Slow, QuorumLoss (a majority of the voters killed
// or cut off), FullDisk, RollingRestart, each aimed at a Target picked
// when it starts (a node by id, a partition's leader, the controller, a
// group's coordinator). A Schedule draws faults, targets and durations
// from a seed.
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
// A Workload is the traffic of a fault test - idempotent acks=all
// producers of unique values (acks=1 for a negative control), a consumer
// group committing what it consumes, a watcher of its committed offsets
// - and Workload.Verify its whole check: the ledger against a reading of
// the topic from the start, the group's consumption and commits, and the
// replicas compared byte for byte once the cluster has converged
// (CompareReplicas, which reads each stopped node's segment files:
// ReadReplicaLog).
//
// Starting processes takes seconds: tests that use this package should
// skip under -short, as this package's own do.
package clustertest

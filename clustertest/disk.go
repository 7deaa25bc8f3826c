package clustertest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
)

// ErrNoDisk reports that a node's own file system (Options.DiskBytes)
// cannot be had here: mounting a tmpfs needs Linux and root.
var ErrNoDisk = errors.New("clustertest: no tmpfs for the nodes' data directories")

// mountDisks mounts a tmpfs of Options.DiskBytes on every node's data
// directory.
func (c *Cluster) mountDisks() error {
	for _, n := range c.nodes {
		if err := os.MkdirAll(n.dir, 0o755); err != nil {
			return fmt.Errorf("clustertest: %w", err)
		}
		if err := mountTmpfs(n.dir, c.opts.DiskBytes); err != nil {
			return fmt.Errorf("%w: node %d: mount tmpfs on %s: %w", ErrNoDisk, n.id, n.dir, err)
		}
		n.mu.Lock()
		n.mounted = true
		n.mu.Unlock()
	}
	return nil
}

// unmountDisks removes the mounts mountDisks made, the nodes being dead;
// if the cluster's directory is kept, each node's files are first copied
// beside it, to DIR/nodeID-disk.
func (c *Cluster) unmountDisks() {
	for _, n := range c.nodes {
		n.mu.Lock()
		mounted := n.mounted
		n.mounted = false
		n.mu.Unlock()
		if !mounted {
			continue
		}
		if c.keepDir {
			exec.Command("cp", "-a", n.dir, n.dir+"-disk").Run()
		}
		unmount(n.dir)
	}
}

// DiskUsage returns the size of the node's own file system and the bytes
// used on it (Options.DiskBytes); ErrNoDisk if it has none.
func (n *Node) DiskUsage() (size, used int64, err error) {
	if !n.hasDisk() {
		return 0, 0, fmt.Errorf("%w: node %d has none (Options.DiskBytes)", ErrNoDisk, n.id)
	}
	return diskUsage(n.dir)
}

// FillDisk makes the node's own file system full (Options.DiskBytes):
// it shrinks it to the bytes in use, so that the next write that needs a
// block fails with ENOSPC - a full disk, for the node's segments,
// indexes, checkpoints and Raft log alike. FreeDisk undoes it.
func (n *Node) FillDisk() error {
	if !n.hasDisk() {
		return fmt.Errorf("%w: node %d has none (Options.DiskBytes)", ErrNoDisk, n.id)
	}
	// The node may write between the measure and the resize, and a
	// tmpfs refuses to shrink below what it holds: measure again.
	var err error
	for range 100 {
		var used int64
		if _, used, err = diskUsage(n.dir); err != nil {
			return err
		}
		if err = resizeTmpfs(n.dir, used); err == nil {
			return nil
		}
	}
	return fmt.Errorf("clustertest: fill node %d's disk: %w", n.id, err)
}

// FreeDisk gives the node's own file system its size again
// (Options.DiskBytes), ending FillDisk.
func (n *Node) FreeDisk() error {
	if !n.hasDisk() {
		return fmt.Errorf("%w: node %d has none (Options.DiskBytes)", ErrNoDisk, n.id)
	}
	if err := resizeTmpfs(n.dir, n.c.opts.DiskBytes); err != nil {
		return fmt.Errorf("clustertest: free node %d's disk: %w", n.id, err)
	}
	return nil
}

func (n *Node) hasDisk() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mounted
}

// DiskSupported reports whether this machine lets the harness give nodes
// file systems of their own (Options.DiskBytes): nil if it can mount a
// tmpfs, else an error wrapping ErrNoDisk saying why not - for a test to
// log when it does without.
func DiskSupported() error {
	dir, err := os.MkdirTemp("", "spool-clustertest-disk-")
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNoDisk, err)
	}
	defer os.Remove(dir)
	if err := mountTmpfs(dir, 1<<20); err != nil {
		return fmt.Errorf("%w: mount a tmpfs (needs Linux and root): %w", ErrNoDisk, err)
	}
	unmount(dir)
	return nil
}

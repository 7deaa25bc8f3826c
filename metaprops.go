package spool

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spoolmq/spool/controller"
	"github.com/spoolmq/spool/internal/vfs"
)

// MetaPropertiesFile is Kafka's file naming the cluster and node a data
// directory belongs to:
//
//	# written by spool
//	version=1
//	cluster.id=<22 characters of base64>
//	node.id=<id>
//
// A cluster node refuses a data directory of another node or cluster.
const MetaPropertiesFile = "meta.properties"

// metaProperties is what meta.properties says.
type metaProperties struct {
	clusterID string
	nodeID    int32 // -1: not recorded
}

// readMetaProperties reads a data directory's meta.properties; a missing
// file is os.ErrNotExist.
func readMetaProperties(dir string) (metaProperties, error) {
	mp := metaProperties{nodeID: -1}
	path := filepath.Join(dir, MetaPropertiesFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return mp, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "cluster.id="); ok {
			mp.clusterID = v
		}
		if v, ok := strings.CutPrefix(line, "node.id="); ok {
			n, err := strconv.ParseInt(v, 10, 32)
			if err != nil || n < 0 {
				return mp, fmt.Errorf("spool: %s: bad node.id %q", path, v)
			}
			mp.nodeID = int32(n)
		}
	}
	if mp.clusterID == "" {
		return mp, fmt.Errorf("spool: %s has no cluster.id", path)
	}
	return mp, nil
}

// ReadClusterID reads the cluster id from a data directory's
// MetaPropertiesFile without writing anything (tools use it). A missing
// file is os.ErrNotExist; one without a cluster.id is an error on which
// the server refuses to start.
func ReadClusterID(dir string) (string, error) {
	mp, err := readMetaProperties(dir)
	return mp.clusterID, err
}

func writeMetaProperties(dir string, mp metaProperties) error {
	content := fmt.Sprintf("# written by spool\nversion=1\ncluster.id=%s\nnode.id=%d\n", mp.clusterID, mp.nodeID)
	return vfs.WriteFileAtomic(vfs.Default, filepath.Join(dir, MetaPropertiesFile), []byte(content))
}

// clusterNodeDirError is a standalone broker's refusal of a cluster node's
// data directory: one with the metadata log (and the quorum's term and
// vote beside it) or its snapshots (package controller), and no topic
// registry. The standalone path would
// take the metadata log for a topic's partition, and a registry written
// there would make the directory unusable as the node's; so Open (and
// RebuildRegistry) refuse it and say how to serve it instead. nil for any
// other directory.
func clusterNodeDirError(dir string) error {
	found := ""
	for _, p := range []string{controller.MetadataDir(dir), controller.SnapshotsDir(dir)} {
		if _, err := os.Stat(p); err == nil {
			found = filepath.Base(p)
			break
		}
	}
	if found == "" {
		return nil
	}
	who, id := "a cluster node", "N"
	if mp, err := readMetaProperties(dir); err == nil && mp.nodeID >= 0 {
		who, id = fmt.Sprintf("node %d of cluster %s", mp.nodeID, mp.clusterID), strconv.Itoa(int(mp.nodeID))
	}
	return fmt.Errorf("%w: %s is the data directory of %s (it holds %s; a cluster node keeps its topics in the metadata log, not in %s), "+
		"which a standalone broker cannot open: serve it as that node, with spool serve --node-id %s --controller-quorum-voters and the cluster's voters",
		ErrInvalidConfig, dir, who, found, registryFile, id)
}

// newClusterID is a random cluster id in Kafka's notation.
func newClusterID() string {
	var id [16]byte
	_, _ = rand.Read(id[:])
	return base64.RawURLEncoding.EncodeToString(id[:])
}

// ClusterID is the id of the cluster the broker belongs to. A standalone
// broker reads it from meta.properties, writing a new one the first time, as
// Kafka's storage format does; a cluster node reports its quorum's ("" until
// it has joined).
func (b *Broker) ClusterID() (string, error) {
	if b.nc != nil {
		return b.nc.q.ClusterID(), nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	mp, err := readMetaProperties(b.dir)
	if err == nil {
		return mp.clusterID, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	mp = metaProperties{clusterID: newClusterID(), nodeID: b.opts.NodeID}
	if err := writeMetaProperties(b.dir, mp); err != nil {
		return "", err
	}
	return mp.clusterID, nil
}

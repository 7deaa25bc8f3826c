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

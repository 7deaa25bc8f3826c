package controller

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
)

// ErrLostQuorumState refuses to start a node whose Raft log has entries
// but whose stable store (its term and vote) is gone: starting afresh could
// let it vote twice in one term.
var ErrLostQuorumState = errors.New("controller: the Raft log has entries but its quorum-state is missing")

// OpenStores opens a node's Raft stores in its data directory: the log as
// a Kafka-format log in MetadataDir (LogStore) and the term and vote in
// QuorumStateFile beside it (StableStore), as Kafka keeps quorum-state in
// __cluster_metadata-0. Both are on stable storage before a write
// returns.
func OpenStores(dataDir string, lg *slog.Logger) (Stores, error) {
	dir := MetadataDir(dataDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Stores{}, err
	}
	logs, err := OpenLogStore(dir, LogStoreOptions{Logger: lg})
	if err != nil {
		return Stores{}, err
	}
	path := filepath.Join(dir, QuorumStateFile)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		if last, _ := logs.LastIndex(); last > 0 {
			logs.Close()
			return Stores{}, fmt.Errorf("%w: %s (restore it, or move %s away and let the node catch up from the others)", ErrLostQuorumState, path, dataDir)
		}
	}
	stable, err := OpenStableStore(path)
	if err != nil {
		logs.Close()
		return Stores{}, err
	}
	return Stores{Log: logs, Stable: stable, Close: logs.Close}, nil
}

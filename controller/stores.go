package controller

import (
	"log/slog"
	"os"
	"path/filepath"
)

// StableStoreFile is the Raft stable store's file (current term and vote)
// in a node's data directory.
const StableStoreFile = "quorum-state"

// OpenStores opens a node's Raft stores in its data directory: the log as
// a Kafka-format log in MetadataDir (LogStore) and the term and vote in
// StableStoreFile (StableStore). Both are on stable storage before a write
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
	stable, err := OpenStableStore(filepath.Join(dataDir, StableStoreFile))
	if err != nil {
		logs.Close()
		return Stores{}, err
	}
	return Stores{Log: logs, Stable: stable, Close: logs.Close}, nil
}

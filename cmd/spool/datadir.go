package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/spoolmq/spool"
)

// Which data directories a command may open. spool.Open creates what is
// missing (the directory, with mkdir -p, its lock file and an empty topic
// registry), which is right for a broker that is to hold data and wrong
// for a command that only looks: "spool topics list --data typo" would
// leave a new, empty data directory behind and report no topics. So a
// command says which kind it is, and the check runs before spool.Open
// touches anything.

// dataDirUse says what a command does with its data directory.
type dataDirUse int

const (
	// useExisting is for commands that read, or change what is there
	// (consume, topics list, groups delete): the directory must already
	// be a spool data directory.
	useExisting dataDirUse = iota
	// useOrCreate is for commands that write records or topics (produce,
	// topics create, serve): a missing directory is created, but only its
	// last element, as mkdir without -p does, so that a mistyped parent
	// is an error rather than a new tree.
	useOrCreate
)

// errNotDataDir: a directory that holds none of what a spool data
// directory holds.
var errNotDataDir = errors.New("is not a spool data directory")

// errNoDataDir: a data directory that does not exist, given to a command
// that does not create one.
var errNoDataDir = errors.New("does not exist")

// isDataDir reports whether dir, an existing directory, holds what a
// spool data directory holds: the topic registry (every broker writes one
// when it first opens the directory), meta.properties (a cluster node's),
// or partition directories (TOPIC-N, holding partition files).
func isDataDir(dir string) (bool, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, e := range entries {
		name := e.Name()
		switch {
		case !e.IsDir():
			if name == "topics.json" || name == spool.MetaPropertiesFile {
				return true, nil
			}
		case isPartitionDirName(name) && isPartitionDir(filepath.Join(dir, name)):
			return true, nil
		}
	}
	return false, nil
}

// isPartitionDir reports whether dir holds a partition's files: its
// partition.metadata or a segment .log. A name like dbus-1 alone does not
// make a directory a partition.
func isPartitionDir(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	return hasLogFile(entries) || slices.ContainsFunc(entries, func(e os.DirEntry) bool {
		return e.Name() == "partition.metadata" && !e.IsDir()
	})
}

// isPartitionDirName reports whether name is spelt as a partition
// directory, TOPIC-N, with N a partition number written canonically.
func isPartitionDirName(name string) bool {
	i := strings.LastIndexByte(name, '-')
	if i <= 0 {
		return false
	}
	n, err := strconv.ParseInt(name[i+1:], 10, 32)
	return err == nil && n >= 0 && strconv.FormatInt(n, 10) == name[i+1:]
}

// checkDataDir returns nil if dir is an existing spool data directory,
// and otherwise an error saying what it is instead. It creates nothing.
func checkDataDir(dir string) error {
	st, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("data directory %s %w", dir, errNoDataDir)
	}
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s %w: it is not a directory", dir, errNotDataDir)
	}
	ok, err := isDataDir(dir)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%s %w: it holds no topics.json, meta.properties or partition directories", dir, errNotDataDir)
	}
	return nil
}

// prepareDataDir readies dir for a command that may create its data
// directory. An existing directory is used as it is (spool.Open refuses
// one that is damaged); a missing one is created if its parent exists,
// and the creation reported on stderr, since a new empty directory where
// data was expected is worth noticing.
func prepareDataDir(name, dir string, stderr io.Writer) error {
	st, err := os.Stat(dir)
	switch {
	case err == nil && st.IsDir():
		return nil
	case err == nil:
		return fmt.Errorf("%s %w: it is not a directory", dir, errNotDataDir)
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	parent := filepath.Dir(filepath.Clean(dir))
	if pst, err := os.Stat(parent); err != nil || !pst.IsDir() {
		return fmt.Errorf("cannot create data directory %s: its parent %s does not exist (create it first)", dir, parent)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "%s: created a new data directory %s\n", name, dir)
	return nil
}

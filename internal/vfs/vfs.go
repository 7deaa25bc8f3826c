// Package vfs is the file layer under spool's storage packages: the few file
// system operations they use, behind interfaces, so that tests can inject the
// faults an operating system will not produce on demand (a full disk, a torn
// write, an fsync that fails).
//
// Default is the real file system. FaultFS wraps another FS and consults an
// Injector before each operation.
package vfs

import (
	"io"
	"io/fs"
	"os"
)

// File is an open file.
type File interface {
	io.ReaderAt
	io.WriterAt
	io.Closer
	// Sync flushes the file's data and metadata to stable storage (fsync).
	Sync() error
	// Truncate changes the file's size.
	Truncate(size int64) error
	// Stat describes the file.
	Stat() (fs.FileInfo, error)
	// Allocate gives the range [off, off+n) real disk blocks, extending the
	// file if needed, so that later writes into it - including writes
	// through a memory map - cannot fail for lack of space. A full disk is
	// reported here, as an error.
	Allocate(off, n int64) error
	// OS returns the underlying *os.File, for memory maps and sendfile.
	OS() *os.File
	// Name is the path the file was opened with.
	Name() string
}

// FS is a file system.
type FS interface {
	// OpenFile opens a file as os.OpenFile does.
	OpenFile(name string, flag int, perm fs.FileMode) (File, error)
	// Remove removes a file or an empty directory.
	Remove(name string) error
	// Rename renames a file, replacing newpath if it exists.
	Rename(oldpath, newpath string) error
	// MkdirAll creates a directory and its parents.
	MkdirAll(path string, perm fs.FileMode) error
	// ReadDir lists a directory, sorted by name.
	ReadDir(name string) ([]fs.DirEntry, error)
	// Stat describes a file.
	Stat(name string) (fs.FileInfo, error)
	// SyncDir makes the directory's entries (creations, renames, removals)
	// durable, by fsyncing the directory.
	SyncDir(path string) error
	// Lock takes an exclusive advisory lock on the file at path, creating
	// it, without waiting. It fails if another process holds the lock.
	// Closing the returned Closer releases it.
	Lock(path string) (io.Closer, error)
}

// Default is the operating system's file system.
var Default FS = osFS{}

type osFS struct{}

type osFile struct{ *os.File }

func (f osFile) OS() *os.File { return f.File }

func (f osFile) Allocate(off, n int64) error { return allocate(f.File, off, n) }

func (osFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) Remove(name string) error                     { return os.Remove(name) }
func (osFS) Rename(oldpath, newpath string) error         { return os.Rename(oldpath, newpath) }
func (osFS) MkdirAll(path string, perm fs.FileMode) error { return os.MkdirAll(path, perm) }
func (osFS) ReadDir(name string) ([]fs.DirEntry, error)   { return os.ReadDir(name) }
func (osFS) Stat(name string) (fs.FileInfo, error)        { return os.Stat(name) }

func (osFS) SyncDir(path string) error {
	d, err := os.Open(path)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

func (osFS) Lock(path string) (io.Closer, error) { return lockFile(path) }

// WriteFileAtomic replaces the file at path with data so that after a crash
// the file holds either its old contents or data, never a mix: it writes a
// temporary file, fsyncs it, renames it over path and fsyncs the directory.
func WriteFileAtomic(fsys FS, path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := fsys.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(data, 0)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsys.Rename(tmp, path)
	}
	if err != nil {
		_ = fsys.Remove(tmp)
		return err
	}
	return fsys.SyncDir(dirOf(path))
}

// ReadFile reads a whole file.
func ReadFile(fsys FS, path string) ([]byte, error) {
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	buf := make([]byte, st.Size())
	n, err := f.ReadAt(buf, 0)
	if err == io.EOF && n == len(buf) {
		err = nil
	}
	return buf[:n], err
}

func dirOf(path string) string {
	for i := len(path) - 1; i >= 0; i-- {
		if os.IsPathSeparator(path[i]) {
			if i == 0 {
				return path[:1]
			}
			return path[:i]
		}
	}
	return "."
}

package vfs

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"sync"
	"syscall"
)

// Op names a file system operation that a FaultFS can fail.
type Op int

// The operations an Injector is consulted about.
const (
	OpOpen Op = iota
	OpWrite
	OpSync
	OpAllocate
	OpTruncate
	OpRename
	OpRemove
	OpSyncDir
	OpRead
)

var opNames = [...]string{"open", "write", "sync", "allocate", "truncate", "rename", "remove", "syncdir", "read"}

func (o Op) String() string { return opNames[o] }

// Common injected errors.
var (
	ErrNoSpace = syscall.ENOSPC
	ErrIO      = syscall.EIO
)

// Injector decides, before each operation, whether it fails. For OpWrite, n
// is the number of bytes asked for and the Injector may return a smaller
// count with an error: that prefix is written first (a torn write). For
// OpAllocate, n is the end of the range asked for (off+len), so that an
// Injector can model a disk with so many bytes free. For other operations n
// is 0. Only for OpWrite does the returned count matter.
type Injector func(op Op, path string, n int) (int, error)

// FaultFS is an FS that asks an Injector before each operation and fails it
// when the Injector says so; otherwise it passes the call to Base.
type FaultFS struct {
	Base   FS
	Inject Injector
}

// NewFaultFS wraps base; inject may be changed later with SetInjector.
func NewFaultFS(base FS, inject Injector) *FaultFS {
	if inject == nil {
		inject = func(Op, string, int) (int, error) { return 0, nil }
	}
	return &FaultFS{Base: base, Inject: inject}
}

func (f *FaultFS) check(op Op, path string) error {
	_, err := f.Inject(op, path, 0)
	if err != nil {
		return &os.PathError{Op: op.String(), Path: path, Err: err}
	}
	return nil
}

// OpenFile implements FS.
func (f *FaultFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	if err := f.check(OpOpen, name); err != nil {
		return nil, err
	}
	file, err := f.Base.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: file, fs: f}, nil
}

// Remove implements FS.
func (f *FaultFS) Remove(name string) error {
	if err := f.check(OpRemove, name); err != nil {
		return err
	}
	return f.Base.Remove(name)
}

// Rename implements FS.
func (f *FaultFS) Rename(oldpath, newpath string) error {
	if err := f.check(OpRename, oldpath); err != nil {
		return err
	}
	return f.Base.Rename(oldpath, newpath)
}

// MkdirAll implements FS.
func (f *FaultFS) MkdirAll(path string, perm fs.FileMode) error { return f.Base.MkdirAll(path, perm) }

// ReadDir implements FS.
func (f *FaultFS) ReadDir(name string) ([]fs.DirEntry, error) { return f.Base.ReadDir(name) }

// Stat implements FS.
func (f *FaultFS) Stat(name string) (fs.FileInfo, error) { return f.Base.Stat(name) }

// SyncDir implements FS.
func (f *FaultFS) SyncDir(path string) error {
	if err := f.check(OpSyncDir, path); err != nil {
		return err
	}
	return f.Base.SyncDir(path)
}

// Lock implements FS.
func (f *FaultFS) Lock(path string) (io.Closer, error) { return f.Base.Lock(path) }

type faultFile struct {
	File
	fs *FaultFS
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	n, err := f.fs.Inject(OpWrite, f.Name(), len(p))
	if err == nil {
		return f.File.WriteAt(p, off)
	}
	n = max(0, min(n, len(p)))
	if n > 0 {
		if m, werr := f.File.WriteAt(p[:n], off); werr != nil {
			return m, werr
		}
	}
	return n, &os.PathError{Op: "write", Path: f.Name(), Err: err}
}

func (f *faultFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.fs.check(OpRead, f.Name()); err != nil {
		return 0, err
	}
	return f.File.ReadAt(p, off)
}

func (f *faultFile) Sync() error {
	if err := f.fs.check(OpSync, f.Name()); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *faultFile) Truncate(size int64) error {
	if err := f.fs.check(OpTruncate, f.Name()); err != nil {
		return err
	}
	return f.File.Truncate(size)
}

func (f *faultFile) Allocate(off, n int64) error {
	if _, err := f.fs.Inject(OpAllocate, f.Name(), int(off+n)); err != nil {
		return &os.PathError{Op: OpAllocate.String(), Path: f.Name(), Err: err}
	}
	return f.File.Allocate(off, n)
}

// Switch is an Injector whose behaviour can be changed while in use: tests
// arm it to fail the next operations of a kind. Safe for concurrent use.
type Switch struct {
	mu    sync.Mutex
	rules []rule
	// Counts records how many times each operation was attempted.
	counts [len(opNames)]int
}

type rule struct {
	op      Op
	match   func(path string) bool
	after   int // let this many matching operations through first
	partial int // for OpWrite: bytes written before the error, -1 for half
	err     error
	times   int // fail this many times; -1 forever
}

// FailAfter makes the op on paths that match (nil matches all) fail with err
// after letting `after` matching calls through, `times` times (-1: forever).
func (s *Switch) FailAfter(op Op, match func(string) bool, after int, err error, times int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rules = append(s.rules, rule{op: op, match: match, after: after, partial: -1, err: err, times: times})
}

// TearWrite makes the next matching write write only `partial` bytes (-1
// for half of them) and then fail with err, forever after if times is -1.
func (s *Switch) TearWrite(match func(string) bool, partial int, err error, times int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rules = append(s.rules, rule{op: OpWrite, match: match, partial: partial, err: err, times: times})
}

// Reset removes all rules.
func (s *Switch) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rules = nil
}

// Count returns how many times op was attempted.
func (s *Switch) Count(op Op) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[op]
}

// Inject is the Injector.
func (s *Switch) Inject(op Op, path string, n int) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counts[op]++
	for i := range s.rules {
		r := &s.rules[i]
		if r.op != op || r.times == 0 || (r.match != nil && !r.match(path)) {
			continue
		}
		if r.after > 0 {
			r.after--
			continue
		}
		if r.times > 0 {
			r.times--
		}
		part := r.partial
		if part < 0 {
			part = n / 2
		}
		return part, r.err
	}
	return n, nil
}

// IsInjected reports whether err came from an injected fault of these kinds.
func IsInjected(err error) bool {
	return errors.Is(err, ErrNoSpace) || errors.Is(err, ErrIO)
}

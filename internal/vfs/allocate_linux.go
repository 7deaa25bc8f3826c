package vfs

import (
	"errors"
	"os"
	"syscall"
)

func allocate(f *os.File, off, n int64) error {
	for {
		err := syscall.Fallocate(int(f.Fd()), 0, off, n)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EOPNOTSUPP), errors.Is(err, syscall.ENOSYS):
			return writeZeros(f, off, n)
		}
		return &os.PathError{Op: "fallocate", Path: f.Name(), Err: err}
	}
}

//go:build !unix

package spool

// openFilesLimit is the process's limit on open files where it cannot be
// asked for: a conservative guess.
func openFilesLimit() int { return 8192 }

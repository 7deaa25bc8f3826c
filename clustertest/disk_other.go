//go:build !linux

package clustertest

import "errors"

var errNoMounts = errors.New("only Linux mounts a tmpfs here")

func mountTmpfs(string, int64) error         { return errNoMounts }
func resizeTmpfs(string, int64) error        { return errNoMounts }
func unmount(string) error                   { return errNoMounts }
func diskUsage(string) (int64, int64, error) { return 0, 0, errNoMounts }

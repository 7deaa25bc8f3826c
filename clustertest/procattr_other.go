//go:build !linux

package clustertest

import "os/exec"

// startCmd starts cmd. Only Linux can tie a child's life to its parent's;
// elsewhere a node whose test process died before its cleanup must be
// killed by hand.
func startCmd(cmd *exec.Cmd) error { return cmd.Start() }

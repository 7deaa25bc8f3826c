//go:build !linux

package clustertest

import "os/exec"

// startCmd starts cmd. Only Linux can tie a child's life to its parent's;
// elsewhere a node whose test process died before its cleanup must be
// killed by hand.
func startCmd(cmd *exec.Cmd) error { return cmd.Start() }

// waitStopped cannot look at a process's state here: SIGSTOP and SIGCONT
// take effect a moment after they are sent.
func waitStopped(int, bool) {}

//go:build proof && !linux

package proof

import "os/exec"

// dieWithParent is a no-op where the kernel has no parent-death signal.
func dieWithParent(*exec.Cmd) {}

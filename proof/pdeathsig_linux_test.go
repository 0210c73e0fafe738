//go:build proof && linux

package proof

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the child get SIGKILL when the test process dies (a
// test timeout, ^C), so that no consumer outlives its test.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

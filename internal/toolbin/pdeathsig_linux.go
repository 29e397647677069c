package toolbin

import (
	"os/exec"
	"syscall"
)

// DieWithTest has the kernel kill cmd's process when the test process
// dies (a timeout, a crash) before its cleanup could.
func DieWithTest(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

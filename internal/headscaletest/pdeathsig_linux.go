package headscaletest

import (
	"os/exec"
	"syscall"
)

// setPdeathsig has the kernel kill the child when the test process dies.
func setPdeathsig(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

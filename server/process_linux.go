package server

import (
	"os/exec"
	"syscall"
)

// setProcessGroup puts the command in a new process group and has the
// kernel kill it if the server dies.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

package supervise

import (
	"os/exec"
	"syscall"
)

// setProcessGroup puts the command in a new process group and has the
// kernel kill it if the server dies, keeping what the sandbox set up.
func setProcessGroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid, cmd.SysProcAttr.Pdeathsig = true, syscall.SIGKILL
}

//go:build !linux

package supervise

import (
	"os/exec"
	"syscall"
)

// setProcessGroup puts the command in a new process group.
func setProcessGroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
}

//go:build !linux

package server

import (
	"os/exec"
	"syscall"
)

// setProcessGroup puts the command in a new process group.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

package main

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill the sandbox when this process dies,
// keeping what the sandbox set up.
func dieWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid, cmd.SysProcAttr.Pdeathsig = true, syscall.SIGKILL
}

//go:build !linux

package main

import (
	"os/exec"
	"syscall"
)

// dieWithParent puts the sandbox in its own process group.
func dieWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
}

package main

import "syscall"

// dieWithParent puts the sandbox in its own process group and has the
// kernel kill it when this process dies.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

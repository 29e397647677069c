//go:build !linux

package main

import "syscall"

// dieWithParent puts the sandbox in its own process group.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

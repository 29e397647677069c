//go:build !linux

package keyringtest

import "syscall"

// sysProcAttr: Start skips before starting anything on these systems.
func sysProcAttr() *syscall.SysProcAttr { return nil }

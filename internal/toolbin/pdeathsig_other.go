//go:build !linux

package toolbin

import "os/exec"

// DieWithTest does nothing here: there is no parent-death signal, so the
// test's cleanup (or the program's own end of input) is what stops it.
func DieWithTest(*exec.Cmd) {}

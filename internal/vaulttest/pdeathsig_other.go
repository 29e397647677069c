//go:build !linux

package vaulttest

import "os/exec"

// setPdeathsig does nothing here: vaultdev still exits when its standard
// input reaches EOF, which happens when the test process dies.
func setPdeathsig(*exec.Cmd) {}

//go:build !linux

package headscaletest

import "os/exec"

// setPdeathsig does nothing here: the test's cleanup is the only thing
// that stops headscale.
func setPdeathsig(*exec.Cmd) {}

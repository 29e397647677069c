//go:build !darwin

package sandbox

import (
	"context"
	"fmt"
	"os/exec"
)

// Wrap implements Sandbox: sandbox-exec exists only on macOS.
func (SandboxExec) Wrap(context.Context, *exec.Cmd, Profile) (*Confinement, error) {
	return nil, fmt.Errorf("%w: sandbox-exec exists only on macOS", ErrUnavailable)
}

// Check implements Checker: sandbox-exec exists only on macOS.
func (SandboxExec) Check() error {
	return fmt.Errorf("%w: sandbox-exec exists only on macOS", ErrUnavailable)
}

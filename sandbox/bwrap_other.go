//go:build !linux

package sandbox

import (
	"context"
	"fmt"
	"os/exec"
)

// Wrap implements Sandbox: bubblewrap exists only on Linux.
func (Bwrap) Wrap(context.Context, *exec.Cmd, Profile) (*Confinement, error) {
	return nil, fmt.Errorf("%w: bubblewrap exists only on Linux", ErrUnavailable)
}

// Check implements Checker: bubblewrap exists only on Linux.
func (Bwrap) Check() error {
	return fmt.Errorf("%w: bubblewrap exists only on Linux", ErrUnavailable)
}

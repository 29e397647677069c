// Package sandbox owns how a command is confined on the trust point: the
// Sandbox interface, its backends, and the classification of failures.
//
// Invariants:
//   - a backend that cannot confine a command here says so with
//     ErrUnavailable; callers refuse (sandbox-unavailable) and never fall
//     back to running the command unconfined;
//   - "native" is the only backend that does not confine, and it is used
//     only when a policy rule names it explicitly.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
)

// ErrUnavailable reports that a backend cannot confine commands on this
// host. Errors wrapping it carry a hint on how to fix it.
var ErrUnavailable = errors.New("sandbox unavailable")

// Sandbox confines a command.
type Sandbox interface {
	// Name is the backend's name as policy rules spell it.
	Name() string
	// Confined reports whether the backend actually confines commands.
	Confined() bool
	// Wrap rewrites cmd, not yet started, so that it runs under the
	// profile. It returns an error wrapping ErrUnavailable when the backend
	// cannot run here, and a Confinement the caller must Close after the
	// run (nil when there is nothing to track).
	Wrap(ctx context.Context, cmd *exec.Cmd, p Profile) (*Confinement, error)
}

// A Checker is a backend that can tell, without running a command,
// whether it could confine one here now (the server's readiness). Its
// errors wrap ErrUnavailable and say how to fix it.
type Checker interface {
	Check() error
}

// Registry resolves backend names to sandboxes.
type Registry map[string]Sandbox

// DefaultRegistry returns the backends this build provides. The running
// executable serves as bwrap's proxied-network bridge (it is coily).
func DefaultRegistry() Registry {
	bridge, _ := os.Executable()
	return Registry{Native{}.Name(): Native{}, Bwrap{}.Name(): Bwrap{Bridge: bridge}, SandboxExec{}.Name(): SandboxExec{}}
}

// WithCgroups returns the registry with bubblewrap running each command in
// its own cgroup of g.
func (r Registry) WithCgroups(g *Cgroups) Registry {
	out := Registry{}
	for name, s := range r {
		if b, ok := s.(Bwrap); ok {
			b.Cgroups = g
			s = b
		}
		out[name] = s
	}
	return out
}

// WithFleet returns the registry with bubblewrap holding every sandbox it
// starts in f, from Wrap to Close, and f killing the command cgroups of
// the registry's subtree (call it after WithCgroups).
func (r Registry) WithFleet(f *Fleet) Registry {
	out := Registry{}
	for name, s := range r {
		if b, ok := s.(Bwrap); ok {
			b.Fleet = f
			f.mu.Lock()
			f.cgroups = b.Cgroups
			f.mu.Unlock()
			s = b
		}
		out[name] = s
	}
	return out
}

// Lookup returns the named backend, or an error wrapping ErrUnavailable.
func (r Registry) Lookup(name string) (Sandbox, error) {
	if s, ok := r[name]; ok {
		return s, nil
	}
	return nil, fmt.Errorf("%w: backend %q is not available in this build", ErrUnavailable, name)
}

// Native runs commands without confinement. It exists for hosts and rules
// where the operator has accepted that, explicitly.
type Native struct{}

// Name implements Sandbox.
func (Native) Name() string { return "native" }

// Confined implements Sandbox: native does not confine.
func (Native) Confined() bool { return false }

// Wrap implements Sandbox by applying only the environment and directory.
func (Native) Wrap(_ context.Context, cmd *exec.Cmd, p Profile) (*Confinement, error) {
	if p.CAFile != nil {
		return nil, fmt.Errorf("%w: native runs cannot be given a CA bundle", ErrUnavailable)
	}
	if p.SSHAgent != "" {
		return nil, fmt.Errorf("%w: native runs cannot be given an ssh agent", ErrUnavailable)
	}
	cmd.Env = p.Env
	cmd.Dir = p.Dir
	return nil, nil
}

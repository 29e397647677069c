package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
)

// Check implements Checker: sandbox-exec is where macOS ships it.
func (SandboxExec) Check() error {
	if fi, err := os.Stat(SandboxExecPath); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: %s is missing (it ships with macOS; is this a stripped-down system?)", ErrUnavailable, SandboxExecPath)
	}
	return nil
}

// Wrap implements Sandbox: cmd becomes sandbox-exec running the original
// command under SandboxExecProfile(p). sandbox-exec execs the word after
// "--" as both the program and its argv[0], so the original argv[0] gives
// way to the original path. In proxied mode the command's environment
// gains HTTP_PROXY and kin, pointing at p.ProxyAddr.
func (SandboxExec) Wrap(_ context.Context, cmd *exec.Cmd, p Profile) (*Confinement, error) {
	if os.Geteuid() == 0 {
		// No sandbox runs with root's credentials, and sandbox-exec cannot
		// switch users (bubblewrap's root callers: Profile.User).
		return nil, fmt.Errorf("%w: coily running as root does not run sandbox-exec commands, which would run as root: run it as an unprivileged user", ErrUnavailable)
	}
	if fi, err := os.Stat(SandboxExecPath); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is missing (it ships with macOS; is this a stripped-down system?)", ErrUnavailable, SandboxExecPath)
	}
	profile, err := SandboxExecProfile(p)
	if err != nil {
		return nil, err
	}
	env, err := sandboxExecEnv(p)
	if err != nil {
		return nil, err
	}
	args := []string{SandboxExecPath, "-p", profile, "--", cmd.Path}
	if len(cmd.Args) > 1 {
		args = append(args, cmd.Args[1:]...)
	}
	cmd.Path, cmd.Args = SandboxExecPath, args
	cmd.Env, cmd.Dir = env, p.Dir
	return nil, nil
}

package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
)

// Wrap implements Sandbox: cmd becomes bwrap running the original command
// under p, with the seccomp program and a status pipe as inherited files.
func (b Bwrap) Wrap(_ context.Context, cmd *exec.Cmd, p Profile) (*Confinement, error) {
	bwrap, err := b.path()
	if err != nil {
		return nil, err
	}
	arch, err := HostSeccompArch()
	if err != nil {
		return nil, err
	}
	prog, err := SeccompFilter(arch, SeccompOptions{AllowUnixSockets: len(p.UnixSockets) > 0 || p.Network == NetworkProxied})
	if err != nil {
		return nil, fmt.Errorf("%w: seccomp filter: %v", ErrUnavailable, err)
	}
	argv := append([]string{cmd.Path}, cmd.Args[1:]...)
	args, err := bwrapArgs(p, argv, realFS{}, b.Bridge)
	if err != nil {
		return nil, err
	}
	filter, err := pipeWith(prog)
	if err != nil {
		return nil, fmt.Errorf("%w: seccomp program: %v", ErrUnavailable, err)
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		filter.Close()
		return nil, fmt.Errorf("bwrap status pipe: %w", err)
	}
	cmd.Path, cmd.Args = bwrap, append([]string{"bwrap"}, args...)
	cmd.Env, cmd.Dir = slices.Clone(p.Env), ""   // bwrap passes its environment on: exactly p.Env
	cmd.ExtraFiles = []*os.File{filter, statusW} // fds 3 and 4 in bwrap
	return &Confinement{childFiles: []*os.File{filter, statusW}, status: statusR}, nil
}

// pipeWith returns the read end of a pipe holding data (bwrap reads the
// seccomp program from it to EOF).
func pipeWith(data []byte) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	// The program is small (under a pipe buffer): write it all, then close.
	if _, err := w.Write(data); err != nil {
		r.Close()
		w.Close()
		return nil, err
	}
	w.Close()
	return r, nil
}

package server

import (
	"context"
	"os"
	"time"

	"coily.dev/coily/access"
	"coily.dev/coily/workspace"
)

// scratchPrefix names each command's private directory in ScratchDir.
const scratchPrefix = workspace.ScratchPrefix

// ScratchDir is where each command's private directories are made.
func (s *Server) ScratchDir() string { return s.cfg.ScratchDir }

// RemoveScratch removes a root server's default scratch directory if it
// is empty: Shutdown tries, and the caller again once every call has
// ended (the gRPC server stopped).
func (s *Server) RemoveScratch() {
	workspace.RemoveScratch(s.cfg.StateDir, s.cfg.ScratchDir, s.cfg.SandboxUser)
}

// privateDir makes a directory for one execution in the scratch
// directory: private to the server, except that a root server's sandbox
// user may pass through it (0711) to reach the files given to it.
func (s *Server) privateDir() (string, error) {
	mode := os.FileMode(0o700)
	if !s.cfg.SandboxUser.IsZero() {
		mode = 0o711
	}
	return workspace.PrivateDir(s.cfg.ScratchDir, scratchPrefix, mode)
}

// workspaceGuard keeps the server's refused workspaces (package workspace).
func (s *Server) workspaceGuard() workspace.Guard {
	return workspace.Guard{StateDir: s.cfg.StateDir, Record: s.record, Log: s.log,
		Now: func() time.Time { return s.cfg.Now() },
		Lockout: func(ctx context.Context, reason string) error {
			_, _, err := s.lockout(ctx, access.ServerCaller, reason)
			return err
		}}
}

// place is where the execution runs, for package workspace.
func (x *execution) place() workspace.Command {
	return workspace.Command{Workspace: x.rule.Workspace, Root: x.root, Home: x.home, Request: x.id}
}

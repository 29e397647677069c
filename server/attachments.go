package server

import (
	"context"

	"coily.dev/coily/attach"
	"coily.dev/coily/attach/cabundle"
	"coily.dev/coily/sandbox"
)

// attachmentsOf are what an execution under rule r carries, in the order
// they are readied (package attach).
func attachmentsOf(x *execution) []attach.Attachment {
	var out []attach.Attachment
	if b := cabundle.New(x.rule.Name, x.rule.CAFile); b != nil {
		out = append(out, b)
	}
	return out
}

// attach readies the execution's attachments in order (step
// 9); what they give the command is in x.run. Each is closed once, by
// the first of: the refusal or the result (closeAttachments), or the
// execution's end (finish).
func (s *Server) attach(ctx context.Context, x *execution) error {
	x.run = &attach.Run{ID: x.id, Scratch: s.cfg.ScratchDir, ScratchPrefix: scratchPrefix, PrivateDir: s.privateDir,
		Give: func(path string) error { return s.giveToSandbox(x, path) }, Secrets: x.scrub, Log: s.log}
	x.onDone(func() { x.closeAttachments(context.Background(), nil) })
	for _, a := range x.attached {
		if err := a.Prepare(ctx, x.run); err != nil {
			return err
		}
	}
	return nil
}

// closeAttachments closes the execution's attachments, last first; what
// they saw goes into end, when given.
func (x *execution) closeAttachments(ctx context.Context, end *attach.End) {
	if end == nil {
		end = &attach.End{}
	}
	for i := len(x.attached) - 1; i >= 0; i-- {
		x.attached[i].Close(context.WithoutCancel(ctx), end)
	}
}

// binds are what the sandbox binds of the execution's egress proxy, ssh
// agent and attachments.
func (x *execution) binds() []sandbox.Bind {
	var out []sandbox.Bind
	if p := x.eg.socket(); p != "" {
		out = append(out, sandbox.Bind{At: sandbox.ProxySocketPath, Path: p})
	}
	if a := x.eg.addr(); a != "" {
		out = append(out, sandbox.Bind{At: sandbox.ProxyAddrBind, Path: a})
	}
	if k := x.eg.knownHosts(); k != "" {
		out = append(out, sandbox.Bind{At: sandbox.KnownHostsPath, Path: k})
	}
	if a := x.ag.socket(); a != "" {
		out = append(out, sandbox.Bind{At: sandbox.SSHAgentPath, Path: a})
	}
	return append(out, x.run.Binds...)
}

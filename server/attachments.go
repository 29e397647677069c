package server

import (
	"context"
	"time"

	"coily.dev/coily/attach"
	"coily.dev/coily/attach/cabundle"
	"coily.dev/coily/attach/egressproxy"
	"coily.dev/coily/attach/gitcredentials"
	"coily.dev/coily/attach/githubapp"
	"coily.dev/coily/attach/leases"
	"coily.dev/coily/attach/sshkeys"
	"coily.dev/coily/policy"
	"coily.dev/coily/scrub"
)

// attachmentsOf are what x carries under its rule, as decided by d, in
// the order they take their credentials and are readied (package
// attach).
func (s *Server) attachmentsOf(x *execution, d policy.Decision) []attach.Attachment {
	out := []attach.Attachment{leases.New(s.leaseConfig(), x.id, x.rule.Name)} // first: it holds the leases before any other takes a value
	if t := githubapp.New(x.rule, d.Args, s.log.With("request_id", x.id)); t != nil {
		out = append(out, t)
	}
	if c := gitcredentials.New(x.rule); c != nil {
		out = append(out, c)
	}
	if p := egressproxy.New(x.rule, s.egress, s.cfg.Now); p != nil {
		out = append(out, p)
	}
	if k := sshkeys.New(x.rule); k != nil {
		out = append(out, k) // after the proxy, whose socket it needs
	}
	if b := cabundle.New(x.rule.Name, x.rule.CAFile); b != nil {
		out = append(out, b)
	}
	return out
}

// leaseConfig is what the leases of dynamic secrets are held, renewed
// and revoked with.
func (s *Server) leaseConfig() leases.Config {
	return leases.Config{Keystore: s.cfg.Keystore, Store: s.cfg.Store, Log: s.log, Now: s.cfg.Now}
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

// keepAttachments starts, as the command starts, what the attachments do
// while it runs, to last until deadline; the stop it returns ends it,
// waiting.
func (x *execution) keepAttachments(deadline time.Time) (stop func()) {
	var stops []func()
	for _, a := range x.attached {
		if k, ok := a.(attach.Keeper); ok {
			stops = append(stops, k.Keep(deadline))
		}
	}
	return func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
}

// takeCredentials has each credentialed attachment take its values out
// of vals, and returns what they took (redacted all the same). On a
// refusal, what was taken so far is returned with it.
func (x *execution) takeCredentials(ctx context.Context, vals map[string]string) ([]scrub.Secret, error) {
	var taken []scrub.Secret
	for _, a := range x.attached {
		if c, ok := a.(attach.Credentialed); ok {
			t, err := c.Take(ctx, vals)
			taken = append(taken, t...)
			if err != nil {
				return taken, err
			}
		}
	}
	return taken, nil
}

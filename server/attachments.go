package server

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"coily.dev/coily/attach"
	"coily.dev/coily/attach/cabundle"
	"coily.dev/coily/attach/egressproxy"
	"coily.dev/coily/attach/envcreds"
	"coily.dev/coily/attach/gitcredentials"
	"coily.dev/coily/attach/githubapp"
	"coily.dev/coily/attach/leases"
	"coily.dev/coily/attach/sshkeys"
	"coily.dev/coily/keystore"
	"coily.dev/coily/policy"
	"coily.dev/coily/refusal"
	"coily.dev/coily/scrub"
)

// attachmentsOf are what x carries under its rule, as decided by d, in
// the order they take their credentials and are readied (package
// attach).
func (s *Server) attachmentsOf(x *execution, d policy.Decision) []attach.Attachment {
	out := []attach.Attachment{leases.New(s.leaseConfig(), x.id, x.rule.Name)} // first: it holds the leases before any other takes a value
	if c := envcreds.New(x.rule); c != nil {
		out = append(out, c)
	}
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
	return leases.Config{Keystore: s.cfg.Keystore, Store: s.cfg.Shared, Log: s.log, Now: s.cfg.Now, Host: s.cfg.Audit.Host()}
}

// fetchCredentials fetches what the credentialed attachments need (step
// 8), every field of one secret with one read: the leases they came with
// are held before anything can use them, then each attachment takes its
// own. What they leave is the child's (childEnv); every value fetched is
// redacted from output. Any failure refuses the request, with
// credential-unavailable and a message naming the reference when a
// value is missing or unusable; nothing runs.
func (s *Server) fetchCredentials(ctx context.Context, x *execution) error {
	refs := credentialRefs(x.attached)
	if len(refs) == 0 {
		return nil
	}
	set, err := s.cfg.Keystore.Fetch(ctx, refs)
	if err != nil {
		var ke *keystore.Error
		if !errors.As(err, &ke) { // keystore errors name the reference, never a value
			err = errors.New("credential unavailable")
		}
		return refusal.Wrap(refusal.CredentialUnavailable, err, "%v", err)
	}
	for _, a := range x.attached {
		if l, ok := a.(attach.Leased); ok {
			if err := l.Hold(set.Leases); err != nil {
				return err
			}
		}
	}
	vals := set.Values
	taken, err := x.takeCredentials(ctx, vals)
	all := maps.Clone(vals) // what was taken never reaches the child, but never leaves either
	for _, t := range taken {
		all[t.Name] = t.Value
	}
	secrets := make([]scrub.Secret, 0, len(all))
	for _, name := range slices.Sorted(maps.Keys(all)) {
		secrets = append(secrets, scrub.Secret{Name: name, Value: all[name]})
	}
	x.scrub = scrub.NewSet(secrets)
	if err != nil {
		return err
	}
	x.secrets = vals
	return nil
}

// credentialRefs are the references to fetch, by the name each
// credentialed attachment is given the value under: a variable of the
// child, or a name policy reserves for what never reaches it.
func credentialRefs(attached []attach.Attachment) map[string]keystore.Ref {
	refs := map[string]keystore.Ref{}
	for _, a := range attached {
		if c, ok := a.(attach.Credentialed); ok {
			maps.Copy(refs, c.Refs())
		}
	}
	return refs
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

// childEnv is what the caller passed plus the credentials the
// attachments left and what they give the command (the git credential
// helper's configuration, the CA variables, SSH_AUTH_SOCK), which no
// caller-passed variable can replace (policy refuses the overlap).
func (x *execution) childEnv() map[string]string {
	var attached map[string]string
	if x.run != nil {
		attached = x.run.Env
	}
	if len(x.secrets) == 0 && len(attached) == 0 {
		return x.req.GetEnv()
	}
	env := maps.Clone(x.req.GetEnv())
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, x.secrets)
	maps.Copy(env, attached)
	return env
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

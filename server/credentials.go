package server

import (
	"context"
	"errors"
	"maps"
	"slices"

	"coily.dev/coily/attach"
	"coily.dev/coily/keystore"
	"coily.dev/coily/refusal"
	"coily.dev/coily/scrub"
)

// fetchCredentials fetches the rule's credentials and git credentials'
// passwords (step 8), every field of one secret with one read, and has
// each credentialed attachment take its own (package attach). Any failure
// refuses the request with credential-unavailable and a message naming the
// reference; nothing runs. The leases of dynamic secrets are recorded
// before anything can use them, and revoked when the execution ends
// (attach/leases).
func (s *Server) fetchCredentials(ctx context.Context, x *execution) error {
	refs := x.credentialRefs()
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

// credentialRefs are the references to fetch, by the child's variable:
// the rule's credentials, each git credential's password under
// gitcred.PasswordVar and what each credentialed attachment needs (policy reserves those names;
// the keys are taken out before the environment is built).
func (x *execution) credentialRefs() map[string]keystore.Ref {
	r := x.rule
	var more []map[string]keystore.Ref
	for _, a := range x.attached {
		if c, ok := a.(attach.Credentialed); ok {
			more = append(more, c.Refs())
		}
	}
	if len(more) == 0 {
		return r.Credentials
	}
	refs := maps.Clone(r.Credentials)
	if refs == nil {
		refs = map[string]keystore.Ref{}
	}
	for _, m := range more {
		maps.Copy(refs, m)
	}
	return refs
}

// childEnv is what the caller passed plus the credentials, the git
// credential helper's configuration, the CA variables and SSH_AUTH_SOCK,
// which no caller-passed variable can replace (policy refuses the
// overlap).
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

// credentialNames lists "NAME=reference" pairs for the audit log.
func credentialNames(creds map[string]keystore.Ref) []string {
	parts := make([]string, 0, len(creds))
	for _, name := range slices.Sorted(maps.Keys(creds)) {
		parts = append(parts, name+"="+creds[name].String())
	}
	return parts
}

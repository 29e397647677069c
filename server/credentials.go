package server

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"

	"coily.dev/coily/keystore"
	"coily.dev/coily/refusal"
	"coily.dev/coily/scrub"
)

// fetchCredentials fetches the rule's credentials (step 8). Any failure
// refuses the request with credential-unavailable and a message naming
// the reference; nothing runs.
func (s *Server) fetchCredentials(ctx context.Context, x *execution) error {
	if len(x.rule.Credentials) == 0 {
		return nil
	}
	vals, err := s.cfg.Keystore.Fetch(ctx, x.rule.Credentials)
	if err != nil {
		var ke *keystore.Error
		if !errors.As(err, &ke) { // keystore errors name the reference, never a value
			err = errors.New("credential unavailable")
		}
		return refusal.Wrap(refusal.CredentialUnavailable, err, "%v", err)
	}
	x.secrets = vals
	secrets := make([]scrub.Secret, 0, len(vals))
	for _, name := range slices.Sorted(maps.Keys(vals)) {
		secrets = append(secrets, scrub.Secret{Name: name, Value: vals[name]})
	}
	x.scrub = scrub.NewSet(secrets)
	return nil
}

// childEnv is what the caller passed plus the credentials, which no
// caller-passed variable can replace (policy refuses the overlap).
func (x *execution) childEnv() map[string]string {
	if len(x.secrets) == 0 {
		return x.req.GetEnv()
	}
	env := maps.Clone(x.req.GetEnv())
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, x.secrets)
	return env
}

// credentialNames lists "NAME=reference" pairs for the audit log.
func credentialNames(creds map[string]keystore.Ref) string {
	parts := make([]string, 0, len(creds))
	for _, name := range slices.Sorted(maps.Keys(creds)) {
		parts = append(parts, name+"="+creds[name].String())
	}
	return strings.Join(parts, ",")
}

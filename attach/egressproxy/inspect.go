package egressproxy

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"time"

	"coily.dev/coily/attach"
	"coily.dev/coily/attach/cabundle"
	"coily.dev/coily/egress"
	"coily.dev/coily/keystore"
	"coily.dev/coily/policy"
	"coily.dev/coily/refusal"
	"coily.dev/coily/sandbox"
	"coily.dev/coily/scrub"
)

// InjectPrefix names the values fetched for `egress.inject`: never a
// variable of the child (policy reserves the prefix).
const InjectPrefix = "COILY_INJECT_"

var _ attach.Credentialed = (*Proxy)(nil)

// Refs are the credentials the proxy injects, one per variable.
func (p *Proxy) Refs() map[string]keystore.Ref {
	refs := map[string]keystore.Ref{}
	for _, in := range p.eg.Inject {
		refs[InjectPrefix+in.Env] = in.Ref
	}
	return refs
}

// Take keeps the injected credentials out of the child's environment:
// the child gets a placeholder under the variable instead (Prepare).
func (p *Proxy) Take(_ context.Context, vals map[string]string) ([]scrub.Secret, error) {
	var taken []scrub.Secret
	for _, name := range slices.Sorted(maps.Keys(p.Refs())) {
		v, ok := vals[name]
		delete(vals, name)
		if !ok || v == "" {
			return taken, refusal.New(refusal.CredentialUnavailable, "credential %s of rule %q (egress inject) is empty", p.Refs()[name], p.rule)
		}
		env := name[len(InjectPrefix):]
		if p.secrets == nil {
			p.secrets = map[string]string{}
		}
		p.secrets[env] = v
		taken = append(taken, scrub.Secret{Name: env, Value: v})
	}
	return taken, nil
}

// systemBundles are where the system's roots live (as crypto/x509 looks
// for them): the first readable one is the base of the sandbox's bundle.
var systemBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/pki/tls/cacert.pem",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// inspection readies TLS inspection for run (Inspect), binding the
// bundle at sandbox.CAPath. nil when the rule inspects nothing.
func (p *Proxy) inspection(run *attach.Run) (*egress.Inspection, error) {
	if len(p.eg.Inspect) == 0 {
		return nil, nil
	}
	insp, env, f, err := Inspect(p.eg, p.secrets, p.caFile, p.validity, p.now(), run.Scratch, run.ScratchPrefix+"egress-ca-")
	if err != nil {
		return nil, refusal.Wrap(refusal.SandboxUnavailable, err, "egress inspection of rule %q: %v", p.rule, err)
	}
	p.bundle = f
	for k, v := range env {
		run.SetEnv(k, v)
	}
	run.Bind(sandbox.Bind{At: sandbox.CAPath, File: f})
	return insp, nil
}

// Inspect readies the TLS inspection of eg: the exec's CA, valid from now
// for validity; a placeholder per injected variable, standing for its
// value in secrets; and the CA bundle the sandbox trusts (caFile, or the
// system's roots, plus the CA), written read-only into dir under prefix
// and returned open, for the caller to bind at sandbox.CAPath and to
// remove. env is what the child's environment gets: the placeholders,
// and every sandbox.CAEnv variable naming sandbox.CAPath.
func Inspect(eg *policy.Egress, secrets map[string]string, caFile string, validity time.Duration, now time.Time, dir, prefix string) (*egress.Inspection, map[string]string, *os.File, error) {
	ca, err := egress.NewAuthority(eg.Inspect, validity, now)
	if err != nil {
		return nil, nil, nil, err
	}
	base, roots, err := roots(caFile)
	if err != nil {
		return nil, nil, nil, err
	}
	insp := &egress.Inspection{CA: ca, Roots: roots, Rules: eg.HTTPRules(), MaxBody: eg.MaxBody}
	env := map[string]string{}
	placeholder := func(name string) string {
		if env[name] == "" {
			env[name] = egress.NewPlaceholder()
		}
		return env[name]
	}
	for _, in := range eg.Inject {
		if in.Form == egress.FormSigV4 {
			continue
		}
		insp.Inject = append(insp.Inject, egress.Injection{Placeholder: placeholder(in.Env), Secret: secrets[in.Env], Host: in.Host,
			Port: in.Port, PathPrefix: in.Path, Form: in.Form, Header: in.Header})
	}
	groups, err := policy.SigV4Groups(eg.Inject)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, g := range groups {
		key := &egress.AWSKey{AccessKeyID: secrets[g.KeyID.Env], SecretPlaceholder: placeholder(g.Secret.Env)}
		if g.Token != nil {
			key.SessionToken, key.TokenPlaceholder = secrets[g.Token.Env], placeholder(g.Token.Env)
		}
		insp.Inject = append(insp.Inject, egress.Injection{Placeholder: placeholder(g.KeyID.Env), Secret: secrets[g.Secret.Env],
			Host: g.KeyID.Host, Port: g.KeyID.Port, PathPrefix: g.KeyID.Path, Form: egress.FormSigV4, AWS: key})
	}
	f, err := cabundle.WriteCopy(dir, prefix, append(append(base, '\n'), ca.CertPEM()...))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("the CA bundle: %w", err)
	}
	for _, k := range sandbox.CAEnv {
		env[k] = sandbox.CAPath
	}
	return insp, env, f, nil
}

// roots are the certificates the sandbox trusted before inspection (PEM)
// and the pool the proxy verifies upstreams with: caFile's, or the
// system's (pool nil).
func roots(caFile string) ([]byte, *x509.CertPool, error) {
	if caFile != "" {
		data, err := cabundle.Read(caFile)
		if err != nil {
			return nil, nil, fmt.Errorf("ca_file %s: %w", caFile, err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(data)
		return data, pool, nil
	}
	for _, path := range systemBundles {
		if data, err := cabundle.Read(path); err == nil {
			return data, nil, nil
		}
	}
	return nil, nil, errors.New("no system CA bundle to add the inspection CA to")
}

// caValidity is how long an exec's CA is valid past its rule's timeout.
const caValidity = 15 * time.Minute

// closeBundle removes the CA bundle.
func (p *Proxy) closeBundle() {
	if p.bundle != nil {
		p.bundle.Close()
		os.Remove(p.bundle.Name())
		p.bundle = nil
	}
}

// timeoutOf is the longest r runs.
func timeoutOf(r *policy.Rule) time.Duration {
	return max(r.Timeout, policy.DefaultTimeout) + caValidity
}

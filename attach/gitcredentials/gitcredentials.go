// Package gitcredentials is the attachment of a rule's git_credentials:
// git inside the sandbox gets each https host's user name and password
// from coily's credential helper (package gitcred), and nowhere else.
// The passwords are fetched with the rule's credentials and reach the
// child under gitcred.PasswordVar, redacted from its output like any
// credential; the helper's configuration (its command at
// sandbox.BridgePath, the addresses and user names) comes with them.
// The package reads the rule's `git_credentials` section too (section.go).
package gitcredentials

import (
	"context"
	"fmt"
	"strings"

	"coily.dev/coily/attach"
	"coily.dev/coily/audit"
	"coily.dev/coily/gitcred"
	"coily.dev/coily/keystore"
	"coily.dev/coily/policy"
	"coily.dev/coily/refusal"
	"coily.dev/coily/sandbox"
	"coily.dev/coily/scrub"
)

// Creds are the git credentials of one rule, for one execution.
type Creds struct {
	list    []GitCredential
	proxied bool // the command's connections go through its egress proxy
}

// New is the attachment of r's git_credentials; nil when it has none.
func New(r *policy.Rule) *Creds {
	list := Of(r)
	if len(list) == 0 {
		return nil
	}
	return &Creds{list: list, proxied: r.Network == policy.NetworkProxied}
}

var _ attach.Credentialed = (*Creds)(nil)

// Refs are the passwords, each under gitcred.PasswordVar (policy
// reserves COILY_GIT_*).
func (c *Creds) Refs() map[string]keystore.Ref {
	refs := map[string]keystore.Ref{}
	for i, g := range c.list {
		refs[gitcred.PasswordVar(i)] = g.Password
	}
	return refs
}

// Take checks each password and leaves it in vals, for the child's
// helper to read. One that would add lines to git's credential answer
// (empty, or a newline or NUL in it) refuses the exec with
// credential-unavailable, naming the reference, never the value.
func (c *Creds) Take(_ context.Context, vals map[string]string) ([]scrub.Secret, error) {
	for i, g := range c.list {
		if !gitcred.ValidPassword(vals[gitcred.PasswordVar(i)]) {
			err := fmt.Errorf("credential %s: not usable as a git password for %s (empty, or a newline or NUL in it)", g.Password, g.Address())
			return nil, refusal.Wrap(refusal.CredentialUnavailable, err, "%v", err)
		}
	}
	return nil, nil
}

// Prepare gives the command the helper's configuration: git runs the
// helper, which answers for these hosts alone.
func (c *Creds) Prepare(_ context.Context, run *attach.Run) error {
	creds := make([]gitcred.Credential, 0, len(c.list))
	for _, g := range c.list {
		creds = append(creds, gitcred.Credential{Host: g.Host, Port: g.Port, Username: g.Username})
	}
	for name, value := range gitcred.Env(sandbox.BridgePath, creds) {
		run.SetEnv(name, value)
	}
	return nil
}

// Close has nothing to undo; when the command ran, its record says which
// passwords it used. The helper answers git inside the sandbox, where the
// command could read a password without it, so what the helper was asked
// is not the server's to trust; but a password is used by sending it to
// its host, and the egress proxy (outside the sandbox, closed before
// this, its rows in the record) saw which hosts the command reached: a
// password counts as used when its host and port were, and is left out
// otherwise. Without an egress proxy (network open) nothing saw it: the
// record says it was given.
func (c *Creds) Close(_ context.Context, end *attach.End) {
	if !end.Result || end.Record == nil {
		return
	}
	for _, g := range c.list {
		what := "git credential helper for https://" + g.Address() + " from " + g.Password.String()
		if !c.proxied {
			end.Record.UseCredential(what + " (given; no egress proxy saw whether it was sent)")
			continue
		}
		if n := reached(end.Record.Egress, g.Host, g.Port); n > 0 {
			end.Record.UseCredential(fmt.Sprintf("%s (its host reached: %d connections)", what, n))
		}
	}
}

// reached counts the connections the egress rows allowed to host:port.
func reached(rows []audit.EgressRow, host string, port int) int {
	n := 0
	for _, r := range rows {
		if r.Decision == "allow" && r.Port == port && strings.EqualFold(r.Host, host) {
			n += r.Conns
		}
	}
	return n
}

// Describe lists the credentials as "host:port=reference" pairs: never
// passwords.
func (c *Creds) Describe(rec *audit.Record) {
	parts := make([]string, 0, len(c.list))
	for _, g := range c.list {
		parts = append(parts, g.Address()+"="+g.Password.String())
	}
	rec.SetList("git_credentials", parts)
}

// Package envcreds is the attachment of a rule's credentials: each
// fetched value reaches the child under the variable the rule names it
// by, and is redacted from its output. The server puts what the
// attachments leave of the fetched values into the child's environment;
// this attachment names the rule's credentials for the fetch and the
// audit records.
package envcreds

import (
	"context"
	"maps"
	"slices"

	"coily.dev/coily/attach"
	"coily.dev/coily/audit"
	"coily.dev/coily/keystore"
	"coily.dev/coily/policy"
	"coily.dev/coily/scrub"
)

// Creds are the credentials of one rule, by the child's variable.
type Creds struct {
	refs map[string]keystore.Ref
}

// New is the attachment of r's credentials; nil when it has none.
func New(r *policy.Rule) *Creds {
	if len(r.Credentials) == 0 {
		return nil
	}
	return &Creds{refs: r.Credentials}
}

var _ attach.Credentialed = (*Creds)(nil)

// Refs are the rule's credentials, each under its variable.
func (c *Creds) Refs() map[string]keystore.Ref { return maps.Clone(c.refs) }

// Take leaves the values in vals: they are the child's.
func (c *Creds) Take(context.Context, map[string]string) ([]scrub.Secret, error) { return nil, nil }

// Prepare has nothing to ready.
func (c *Creds) Prepare(context.Context, *attach.Run) error { return nil }

// Close has nothing to undo; when the command ran, its record says which
// variables it was given a credential in.
func (c *Creds) Close(_ context.Context, end *attach.End) {
	if !end.Result || end.Record == nil {
		return
	}
	for _, name := range slices.Sorted(maps.Keys(c.refs)) {
		end.Record.UseCredential("env " + name + " from " + c.refs[name].String())
	}
}

// Describe lists the credentials as "NAME=reference" pairs, by name:
// never values.
func (c *Creds) Describe(rec *audit.Record) {
	parts := make([]string, 0, len(c.refs))
	for _, name := range slices.Sorted(maps.Keys(c.refs)) {
		parts = append(parts, name+"="+c.refs[name].String())
	}
	rec.SetList("credentials", parts)
}

package envcreds

import (
	"context"
	"slices"
	"testing"

	"coily.dev/coily/attach"
	"coily.dev/coily/audit"
	"coily.dev/coily/policy"
)

// The rule's credentials are fetched under their variables and left to
// the child; the audit record names variables and references, sorted,
// never values.
func TestCredentials(t *testing.T) {
	p, err := policy.Parse("p.yaml", []byte(`version: 1
commands:
  - name: aws
    binary: /bin/true
    credentials: {AWS_SECRET_ACCESS_KEY: "file:secret", AWS_ACCESS_KEY_ID: "file:id"}
`))
	if err != nil {
		t.Fatal(err)
	}
	c := New(p.Rules()[0])
	refs := c.Refs()
	if len(refs) != 2 || refs["AWS_ACCESS_KEY_ID"].String() != "file:id" || refs["AWS_SECRET_ACCESS_KEY"].String() != "file:secret" {
		t.Fatalf("refs %v", refs)
	}
	delete(refs, "AWS_ACCESS_KEY_ID") // the caller's copy
	vals := map[string]string{"AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "s3cr3t-value"}
	if taken, err := c.Take(context.Background(), vals); err != nil || taken != nil || len(vals) != 2 {
		t.Fatalf("Take: %v, %v, %d values left", taken, err, len(vals))
	}
	var rec audit.Record
	c.Describe(&rec)
	if d := rec.Lists["credentials"]; !slices.Equal(d, []string{"AWS_ACCESS_KEY_ID=file:id", "AWS_SECRET_ACCESS_KEY=file:secret"}) {
		t.Errorf("credentials = %q", d)
	}
	// The command ran: its result says which variables got a credential
	// (what it used, apart from the configuration); a refusal says none.
	c.Close(context.Background(), &attach.End{Record: &rec})
	if rec.CredentialsUsed != nil {
		t.Errorf("a refusal's record: %q", rec.CredentialsUsed)
	}
	c.Close(context.Background(), &attach.End{Record: &rec, Result: true})
	if !slices.Equal(rec.CredentialsUsed, []string{"env AWS_ACCESS_KEY_ID from file:id", "env AWS_SECRET_ACCESS_KEY from file:secret"}) {
		t.Errorf("credentials used: %q", rec.CredentialsUsed)
	}
	if New(&policy.Rule{}) != nil {
		t.Error("an attachment without credentials")
	}
}

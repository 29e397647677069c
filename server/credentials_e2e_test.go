package server_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"coily.dev/coily/audit"
	"coily.dev/coily/internal/canary"
	"coily.dev/coily/internal/testlog"
	"coily.dev/coily/internal/testserver"
	"coily.dev/coily/keystore"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
	"coily.dev/coily/scrub"
)

// leakCheck fails the test when data holds a form of the secret (those
// internal/canary looks for), naming where, never the value.
func leakCheck(t *testing.T, where string, data []byte, secret string) {
	t.Helper()
	c := canary.New(t)
	c.AddString("the credential", secret)
	c.CheckText(where, string(data))
}

// credentialServer starts a server whose file keystore holds the canary.
func credentialServer(t *testing.T, secret string, log io.Writer, cacheTTL time.Duration) (*testserver.Instance, string) {
	t.Helper()
	credFile := filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(credFile, []byte("canary="+secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ks := keystore.New(keystore.Config{Backends: map[string]keystore.Backend{keystore.BackendFile: keystore.NewFile(credFile)}, CacheTTL: cacheTTL})
	in := testserver.Start(t, testserver.Options{Keystore: ks, Log: log, Policy: `version: 1
limits: {concurrency: 4}
roles: {operator: {permissions: [exec, lockout, unlock], commands: ["*"]}}
commands:
  - {name: sh, binary: /bin/sh, args: ["**"], flags: any, credentials: {CANARY: "file:canary"}}
  - {name: env, binary: /usr/bin/env, credentials: {CANARY: "file:canary"}}
  - {name: missing, binary: /bin/echo, args: ["**"], credentials: {CANARY: "file:nope"}}
`})
	return in, credFile
}

// rawExec runs one Exec and returns every byte the server sent: each
// response message as marshalled and the final status.
func rawExec(t *testing.T, in *testserver.Instance, argv ...string) (stdout string, wire []byte, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := in.Client.API.Exec(ctx, &coilyv1.ExecRequest{Argv: argv})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for {
		m, rerr := st.Recv()
		if rerr != nil {
			if errors.Is(rerr, io.EOF) {
				return out.String(), wire, nil
			}
			sp, _ := proto.Marshal(status.Convert(rerr).Proto())
			return out.String(), append(wire, sp...), refusal.FromStatus(rerr)
		}
		b, _ := proto.Marshal(m)
		wire = append(wire, b...)
		if o := m.GetOutput(); o != nil {
			out.Write(o.GetData())
		}
	}
}

// The canary: a secret injected into commands that try every ordinary way
// of printing it never reaches a response byte, a log line or the audit
// log, and the commands see it.
func TestCredentialCanary(t *testing.T) {
	requireBwrap(t)
	secret := "canary/" + rand.Text() + "+" + rand.Text() // '/' and '+' make the URL and base64 forms differ
	var log testlog.Buffer
	in, _ := credentialServer(t, secret, &log, 0)
	const marker = "[REDACTED:CANARY]"
	tests := []struct {
		name, script string
		want         string // in the (scrubbed) output
	}{
		{"whole", `printf '%s\n' "$CANARY"`, marker},
		{"split across writes", `printf '%s' "$CANARY" | head -c 9; sleep 0.2; printf '%s\n' "$CANARY" | tail -c +10`, marker},
		{"base64", `printf '%s' "$CANARY" | base64 -w0`, marker},
		{"base64url", `printf '%s' "$CANARY" | basenc --base64url -w0`, marker},
		{"hex", `printf '%s' "$CANARY" | od -An -v -tx1 | tr -d ' \n'`, marker},
		{"file in workspace", `printf '%s' "$CANARY" > token.txt && cat token.txt`, marker},
		{"error", `echo "fatal: bad credentials $CANARY" >&2; exit 3`, marker},
		{"seen by the command", `test "${#CANARY}" -gt 40 && echo present`, "present"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, wire, err := rawExec(t, in, "/bin/sh", "-c", tc.script)
			if err != nil && !strings.Contains(tc.name, "error") {
				t.Fatalf("exec: %v", err)
			}
			leakCheck(t, "gRPC response", wire, secret)
			leakCheck(t, "output", []byte(out), secret)
			if !strings.Contains(out, tc.want) {
				t.Errorf("output %q lacks %q", scrub.NewSet([]scrub.Secret{{Name: "CANARY", Value: secret}}).RedactString(out), tc.want)
			}
		})
	}
	out, wire, err := rawExec(t, in, "/usr/bin/env")
	if err != nil {
		t.Fatal(err)
	}
	leakCheck(t, "env response", wire, secret)
	if !strings.Contains(out, "CANARY="+marker+"\n") {
		t.Errorf("env does not show the redacted credential")
	}
	in.Stop()
	leakCheck(t, "server log", log.Bytes(), secret)
	files, _ := filepath.Glob(filepath.Join(in.StateDir, "audit", "*.jsonl"))
	var auditData []byte
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		auditData = append(auditData, data...)
	}
	if len(auditData) == 0 {
		t.Fatal("no audit log")
	}
	leakCheck(t, "audit log", auditData, secret)
	if !bytes.Contains(auditData, []byte(`CANARY=file:canary`)) {
		t.Error("the audit log does not name the credential's reference")
	}
	if !bytes.Contains(auditData, []byte(`"credentials_used":["env CANARY from file:canary"]`)) {
		t.Error("the results do not say the credential was used")
	}
}

// A credential that cannot be fetched refuses the request with
// credential-unavailable, naming the reference; nothing runs.
func TestCredentialUnavailable(t *testing.T) {
	in, _ := credentialServer(t, "some-secret-value", io.Discard, 0)
	_, _, err := rawExec(t, in, "/bin/echo", "ran")
	wantCode(t, err, refusal.CredentialUnavailable)
	if msg := refusal.As(err).Msg; !strings.Contains(msg, "file:nope") {
		t.Errorf("message %q does not name the reference", msg)
	}
	rec := in.WaitAudit(t, func(r audit.Record) bool { return r.Code == string(refusal.CredentialUnavailable) })
	if rec.Decision != "refuse" {
		t.Errorf("audit decision %q", rec.Decision)
	}
}

// Lockout drops the cache: a value changed in the backend is seen after a
// lockout and unlock, not before (the cache outlives a single Exec).
func TestLockoutDropsCachedCredentials(t *testing.T) {
	in, credFile := credentialServer(t, "old-value-1234", io.Discard, time.Hour)
	prefix := func() string {
		// The first three characters are below what the scrubber matches:
		// enough to tell the values apart.
		out, _, err := rawExec(t, in, "/bin/sh", "-c", `printf '%s' "$CANARY" | cut -c1-3`)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	if got := prefix(); got != "old" {
		t.Fatalf("first fetch = %q", got)
	}
	if err := os.WriteFile(credFile, []byte("canary=new-value-5678\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := prefix(); got != "old" {
		t.Fatalf("cached fetch = %q, want old", got)
	}
	ctx := context.Background()
	api := in.Client.API
	if _, err := api.Lockout(ctx, &coilyv1.LockoutRequest{Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Unlock(ctx, &coilyv1.UnlockRequest{Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	if got := prefix(); got != "new" {
		t.Fatalf("after lockout = %q, want new", got)
	}
}

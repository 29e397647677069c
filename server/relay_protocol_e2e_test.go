package server_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/audit"
	"coily.dev/coily/descriptor"
	"coily.dev/coily/internal/testserver"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
	"coily.dev/coily/server"
)

// protocolPolicy adds a rate-limited rule to relayPolicy.
var protocolPolicy = strings.Replace(relayPolicy, "commands: [echo, sh, sleep]", "commands: [echo, sh, sleep, once]", 1) +
	`  - {name: once, binary: /bin/true, args: ["**"], flags: any, sandbox: native, rate: {per_minute: 1, burst: 1}}
`

func newProtocolEnv(t *testing.T) *relayEnv {
	t.Helper()
	in := testserver.Start(t, testserver.Options{Policy: protocolPolicy})
	e := &relayEnv{in: in, api: in.Client.API}
	k, err := e.api.IssueKey(context.Background(), &coilyv1.IssueKeyRequest{Sandbox: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	e.key = k.GetKey().GetSecret()
	return e
}

// relayRaw relays a file and returns the response file's bytes.
func (e *relayEnv) relayRaw(t *testing.T, id string, file []byte) []byte {
	t.Helper()
	resp, err := e.api.Relay(context.Background(), &coilyv1.RelayRequest{Sandbox: "demo", Id: id, Request: file})
	if err != nil {
		t.Fatalf("relay: %v", err)
	}
	return resp.GetResponse()
}

// sign signs r (its nonce and created_at filled in when empty).
func (e *relayEnv) sign(t *testing.T, r *descriptor.Request) []byte {
	t.Helper()
	if r.Nonce == "" {
		r.Nonce = strings.ReplaceAll(descriptor.NewID(), "-", "")
	}
	if r.CreatedAt.IsZero() {
		r.CreatedAt = time.Now().UTC()
	}
	r.Sandbox = "demo"
	file, err := descriptor.MarshalRequest(r, e.key)
	if err != nil {
		t.Fatal(err)
	}
	return file
}

// wantAudited checks that a refused response names the audit record of
// its refusal.
func wantAudited(t *testing.T, in *testserver.Instance, id string, r *descriptor.Response) {
	t.Helper()
	if r.AuditID == "" {
		t.Fatalf("refusal %s of %s carries no audit_id", r.Code, id)
	}
	rec := in.WaitAudit(t, func(a audit.Record) bool { return a.ID == r.AuditID })
	if rec.Decision != "refuse" || rec.Code != r.Code || rec.RelayID != id {
		t.Fatalf("audit_id %s names %+v, not the refusal %s of %s", r.AuditID, rec, r.Code, id)
	}
}

// secretValue stands for an env value or stdin no message may show.
const secretValue = "s3cr3t-VALUE-4f9a"

// noSecret checks that neither a response nor the audit log shows a
// secret value or the sandbox's key.
func noSecret(t *testing.T, e *relayEnv, resp []byte) {
	t.Helper()
	recs, err := audit.Tail(e.in.StateDir+"/audit", 1000)
	if err != nil {
		t.Fatal(err)
	}
	all, err := json.Marshal(recs)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{secretValue, hex.EncodeToString(e.key)} {
		if bytes.Contains(resp, []byte(s)) || bytes.Contains(all, []byte(s)) {
			t.Fatalf("a secret shows in the response or the audit log:\n%s", resp)
		}
	}
}

// Which refusals use up a request id: after each refusal, a new request
// with the same id (another body, a fresh nonce) runs if and only if the
// id was not used up; a used-up id keeps its first answer, byte for byte.
func TestRelayRefusalsAndTheRequestID(t *testing.T) {
	cases := []struct {
		name     string
		code     refusal.Code
		consumed bool
		// refuse makes the server refuse a request with id and returns
		// the file it relayed.
		refuse func(t *testing.T, e *relayEnv, id string) []byte
		after  func(t *testing.T, e *relayEnv) // undoes the cause
	}{
		{name: "unreadable file", code: refusal.BadRequest, refuse: func(t *testing.T, e *relayEnv, id string) []byte {
			return []byte("version: 1\nversion: 1\n")
		}},
		{name: "file carries another id", code: refusal.BadRequest, refuse: func(t *testing.T, e *relayEnv, id string) []byte {
			return e.sign(t, &descriptor.Request{ID: descriptor.NewID(), Argv: []string{"/bin/echo"}})
		}},
		{name: "tampered", code: refusal.HMACFail, refuse: func(t *testing.T, e *relayEnv, id string) []byte {
			return bytes.Replace(e.sign(t, &descriptor.Request{ID: id, Argv: []string{"/bin/echo", "a"}}), []byte(`"a"`), []byte(`"b"`), 1)
		}},
		{name: "stale", code: refusal.StaleRequest, refuse: func(t *testing.T, e *relayEnv, id string) []byte {
			return e.sign(t, &descriptor.Request{ID: id, CreatedAt: time.Now().Add(-6 * time.Minute).UTC(), Argv: []string{"/bin/echo"}})
		}},
		{name: "Exec validation", code: refusal.BadRequest, refuse: func(t *testing.T, e *relayEnv, id string) []byte {
			return e.sign(t, &descriptor.Request{ID: id, Argv: []string{"./echo", "relative"}})
		}},
		{name: "paused", code: refusal.PauseActive, refuse: func(t *testing.T, e *relayEnv, id string) []byte {
			if _, err := e.api.Pause(context.Background(), &coilyv1.PauseRequest{Reason: "test"}); err != nil {
				t.Fatal(err)
			}
			return e.sign(t, &descriptor.Request{ID: id, Argv: []string{"/bin/echo"}})
		}, after: func(t *testing.T, e *relayEnv) {
			if _, err := e.api.Resume(context.Background(), &coilyv1.ResumeRequest{Reason: "test"}); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "nonce replayed", code: refusal.ReplayDetected, refuse: func(t *testing.T, e *relayEnv, id string) []byte {
			first := &descriptor.Request{ID: descriptor.NewID(), Argv: []string{"/bin/echo"}}
			if r := e.relay(t, first.ID, e.sign(t, first)); r.Outcome != descriptor.OutcomeExit {
				t.Fatalf("first: %+v", r)
			}
			return e.sign(t, &descriptor.Request{ID: id, Nonce: first.Nonce, Argv: []string{"/bin/echo"}})
		}},
		{name: "policy deny", code: refusal.PolicyDeny, consumed: true, refuse: func(t *testing.T, e *relayEnv, id string) []byte {
			return e.sign(t, &descriptor.Request{ID: id, Argv: []string{"/bin/cat", "/etc/hostname"}})
		}},
		{name: "env the rule does not allow", code: refusal.PolicyDeny, consumed: true, refuse: func(t *testing.T, e *relayEnv, id string) []byte {
			return e.sign(t, &descriptor.Request{ID: id, Argv: []string{"/bin/echo"}, Env: map[string]string{"TOKEN": secretValue},
				Stdin: []byte(secretValue), Note: "n"})
		}},
		{name: "rate limit", code: refusal.RateLimit, consumed: true, refuse: func(t *testing.T, e *relayEnv, id string) []byte {
			first := &descriptor.Request{ID: descriptor.NewID(), Argv: []string{"/bin/true"}}
			if r := e.relay(t, first.ID, e.sign(t, first)); r.Outcome != descriptor.OutcomeExit {
				t.Fatalf("first: %+v", r)
			}
			return e.sign(t, &descriptor.Request{ID: id, Argv: []string{"/bin/true"}})
		}},
		{name: "command timeout", code: refusal.CommandTimeout, consumed: true, refuse: func(t *testing.T, e *relayEnv, id string) []byte {
			return e.sign(t, &descriptor.Request{ID: id, Timeout: time.Second, Argv: []string{"/bin/sleep", "30"}})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newProtocolEnv(t)
			id := descriptor.NewID()
			file := c.refuse(t, e, id)
			first := e.relayRaw(t, id, file)
			r, err := descriptor.ParseResponse(first)
			if err != nil {
				t.Fatal(err)
			}
			wantRefused(t, r, c.code)
			if r.ID != id {
				t.Fatalf("answered for %s, want %s", r.ID, id)
			}
			wantAudited(t, e.in, id, r)
			noSecret(t, e, first)
			if c.after != nil {
				c.after(t, e)
			}
			// The same id, another request.
			retry := e.relay(t, id, e.sign(t, &descriptor.Request{ID: id, Argv: []string{"/bin/echo", "retry"}}))
			switch {
			case c.consumed:
				wantRefused(t, retry, refusal.ReplayDetected)
				wantAudited(t, e.in, id, retry)
				// The refused file again: its recorded answer, untouched.
				if again := e.relayRaw(t, id, file); !bytes.Equal(again, first) {
					t.Fatalf("recorded answer changed:\n%s\n%s", first, again)
				}
			case retry.Outcome != descriptor.OutcomeExit || retry.StdoutText != "retry\n":
				t.Fatalf("the id was used up by a %s refusal: %+v", c.code, retry)
			}
		})
	}
}

// A second file with the same id and another body never replaces the
// stored answer, whether it comes while the first runs, after it was
// answered, or in YAML.
func TestRelaySameIDOtherBodyKeepsTheAnswer(t *testing.T) {
	e := newProtocolEnv(t)
	dir := t.TempDir()
	started, release := filepath.Join(dir, "started"), filepath.Join(dir, "release")
	id := descriptor.NewID()
	file := e.sign(t, &descriptor.Request{ID: id, Argv: []string{"/bin/sh", "-c",
		"touch " + started + "; while [ ! -e " + release + " ]; do sleep 0.05; done; echo first"}})
	done := make(chan []byte, 1)
	go func() {
		resp, err := e.api.Relay(context.Background(), &coilyv1.RelayRequest{Sandbox: "demo", Id: id, Request: file})
		if err != nil {
			t.Errorf("relay: %v", err)
		}
		done <- resp.GetResponse()
	}()
	testserver.Poll(t, 10*time.Second, "the command to start", func() bool { _, err := os.Stat(started); return err == nil })
	other := func() []byte {
		return e.sign(t, &descriptor.Request{ID: id, Argv: []string{"/bin/echo", "second"}})
	}
	// While it runs.
	r := e.relay(t, id, other())
	wantRefused(t, r, refusal.ReplayDetected)
	wantAudited(t, e.in, id, r)
	touch(t, release)
	var answer []byte
	select {
	case answer = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("no answer")
	}
	if a, err := descriptor.ParseResponse(answer); err != nil || a.StdoutText != "first\n" {
		t.Fatalf("answer %s: %v", answer, err)
	}
	// After it was answered, as JSON and as YAML.
	wantRefused(t, e.relay(t, id, other()), refusal.ReplayDetected)
	yaml := "version: 1\nid: " + id + "\ncreated_at: \"" + time.Now().UTC().Format(time.RFC3339) + "\"\nnonce: " +
		strings.Repeat("y", 32) + "\nsandbox: demo\nargv: [/bin/echo, third]\nhmac: \"" + strings.Repeat("0", 64) + "\"\n"
	_, canon, err := descriptor.ParseRequest([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	yaml = strings.Replace(yaml, strings.Repeat("0", 64), descriptor.Sign(canon, e.key), 1)
	wantRefused(t, e.relay(t, id, []byte(yaml)), refusal.ReplayDetected)
	// The stored answer is untouched, byte for byte.
	if again := e.relayRaw(t, id, file); !bytes.Equal(again, answer) {
		t.Fatalf("stored answer changed:\n%s\n%s", answer, again)
	}
}

// vectors reads docs/protocol-vectors.json.
func vectors(t *testing.T) (v struct {
	MaxAgeSeconds   int `json:"max_age_seconds"`
	MaxSkewSeconds  int `json:"max_skew_seconds"`
	TeardownAnswers []struct {
		Name    string   `json:"name"`
		Members []string `json:"members"`
		File    string   `json:"file"`
	} `json:"teardown_answers"`
}) {
	t.Helper()
	data, err := os.ReadFile("../docs/protocol-vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestRelayFreshnessMatchesTheVectors(t *testing.T) {
	v := vectors(t)
	if server.RelayMaxAge != time.Duration(v.MaxAgeSeconds)*time.Second || server.RelayMaxSkew != time.Duration(v.MaxSkewSeconds)*time.Second {
		t.Fatalf("window %s/%s, the vectors say %ds/%ds", server.RelayMaxAge, server.RelayMaxSkew, v.MaxAgeSeconds, v.MaxSkewSeconds)
	}
}

func memberNames(t *testing.T, file []byte) []string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(file, &m); err != nil {
		t.Fatal(err)
	}
	return slices.Sorted(maps.Keys(m))
}

// The answers of torn-down requests have exactly the members
// docs/protocol-vectors.json lists; the one of a request torn down before
// it started is the file it gives.
func TestRelayTeardownAnswersAsDocumented(t *testing.T) {
	v := vectors(t)
	if len(v.TeardownAnswers) != 2 {
		t.Fatalf("teardown answers: %+v", v.TeardownAnswers)
	}
	before, running := v.TeardownAnswers[0], v.TeardownAnswers[1]
	e := newProtocolEnv(t)
	teardown := func(id string) *coilyv1.RelayTeardownResponse {
		td, err := descriptor.MarshalTeardown(&descriptor.Teardown{ID: id, CreatedAt: time.Now().UTC(),
			Nonce: strings.ReplaceAll(descriptor.NewID(), "-", ""), Sandbox: "demo"}, e.key)
		if err != nil {
			t.Fatal(err)
		}
		r, err := e.api.RelayTeardown(context.Background(), &coilyv1.RelayTeardownRequest{Sandbox: "demo", Id: id, Teardown: td})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	// Before it started.
	id := descriptor.NewID()
	if teardown(id).GetCancelled() {
		t.Fatal("cancelled a request that never ran")
	}
	got := e.relayRaw(t, id, e.sign(t, &descriptor.Request{ID: id, Argv: []string{"/bin/echo"}}))
	if want := strings.ReplaceAll(before.File, "5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84", id); string(got) != want {
		t.Fatalf("answer:\n got %s\nwant %s", got, want)
	}
	if names := memberNames(t, got); !slices.Equal(names, before.Members) {
		t.Fatalf("members %v, want %v", names, before.Members)
	}

	// While it runs.
	started := filepath.Join(t.TempDir(), "started")
	id = descriptor.NewID()
	file := e.sign(t, &descriptor.Request{ID: id, Argv: []string{"/bin/sh", "-c", "touch " + started + "; exec sleep 30"}})
	done := make(chan []byte, 1)
	go func() { done <- e.relayRaw(t, id, file) }()
	testserver.Poll(t, 10*time.Second, "the command to start", func() bool { _, err := os.Stat(started); return err == nil })
	if !teardown(id).GetCancelled() {
		t.Fatal("a running request was not cancelled")
	}
	select {
	case got = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("teardown did not end the request")
	}
	if names := memberNames(t, got); !slices.Equal(names, running.Members) {
		t.Fatalf("members %v, want %v (%s)", names, running.Members, got)
	}
	r, err := descriptor.ParseResponse(got)
	if err != nil {
		t.Fatal(err)
	}
	if r.Code != "internal" || r.Message != "cancelled by a teardown" || r.DurationMS != 0 || r.Rule != "sh" {
		t.Fatalf("answer %s", got)
	}
	wantAudited(t, e.in, id, r)
	if rec := e.in.WaitAudit(t, func(a audit.Record) bool { return a.ID == r.AuditID }); rec.Event != "exec.result" {
		t.Fatalf("audit_id names a %s record", rec.Event)
	}
	// Recorded: relayed again, the same answer.
	if again := e.relayRaw(t, id, file); !bytes.Equal(again, got) {
		t.Fatalf("recorded answer:\n%s\n%s", got, again)
	}
}

// A refusal of the call itself (a gRPC error) names its audit record too,
// and the bridge copies it into the refused response.
func TestRelayCallRefusalNamesItsAuditRecord(t *testing.T) {
	e := newProtocolEnv(t)
	_, err := e.api.Relay(context.Background(), &coilyv1.RelayRequest{Sandbox: "other", Id: descriptor.NewID(), Request: []byte("{}")})
	r := refusal.FromStatus(err)
	wantCode(t, r, refusal.PermissionDenied)
	if r.AuditID == "" {
		t.Fatal("no audit_id in the refusal")
	}
	rec := e.in.WaitAudit(t, func(a audit.Record) bool { return a.ID == r.AuditID })
	if rec.Event != "relay" || rec.Decision != "refuse" || rec.Code != string(refusal.PermissionDenied) {
		t.Fatalf("audit_id names %+v", rec)
	}
	// Refused before the handler ran (row 3): locked out.
	if _, err := e.api.Lockout(context.Background(), &coilyv1.LockoutRequest{Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	_, err = e.api.Relay(context.Background(), &coilyv1.RelayRequest{Sandbox: "demo", Id: descriptor.NewID(), Request: []byte("{}")})
	r = refusal.FromStatus(err)
	wantCode(t, r, refusal.LockoutActive)
	rec = e.in.WaitAudit(t, func(a audit.Record) bool { return r.AuditID != "" && a.ID == r.AuditID })
	if rec.Event != "call" || rec.Decision != "refuse" || rec.Code != string(refusal.LockoutActive) {
		t.Fatalf("audit_id names %+v", rec)
	}
}

// Only the current generation verifies: after a rotation the previous
// key gets hmac-fail (audited), the new one runs.
func TestRelayKeyGenerations(t *testing.T) {
	e := newProtocolEnv(t)
	old := e.key
	k, err := e.api.RotateKeys(context.Background(), &coilyv1.RotateKeysRequest{Sandbox: "demo"})
	if err != nil || k.GetKey().GetGeneration() != 2 || bytes.Equal(k.GetKey().GetSecret(), old) {
		t.Fatalf("rotate: %v %v", k, err)
	}
	id := descriptor.NewID()
	r := e.relay(t, id, e.sign(t, &descriptor.Request{ID: id, Argv: []string{"/bin/echo", "old"}}))
	wantRefused(t, r, refusal.HMACFail)
	wantAudited(t, e.in, id, r)
	e.key = k.GetKey().GetSecret()
	// The id was not used up by the refusal.
	if r := e.relay(t, id, e.sign(t, &descriptor.Request{ID: id, Argv: []string{"/bin/echo", "new"}})); r.StdoutText != "new\n" {
		t.Fatalf("generation 2: %+v", r)
	}
}

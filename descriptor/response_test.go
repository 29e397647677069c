package descriptor

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

func TestResponseRoundTrip(t *testing.T) {
	r := &Response{ID: "5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84", Outcome: OutcomeExit, ExitCode: 1,
		DurationMS: 1234, AuditID: "a-17", Rule: "git-read", StderrTruncated: true}
	r.SetOutput([]byte("ok\n"), []byte{0xff, 'x'})
	if r.StdoutText != "ok\n" || r.StdoutBase64 != "" || r.StderrText != "" || r.StderrBase64 != "/3g=" {
		t.Fatalf("SetOutput: %+v", r)
	}
	out, err := MarshalResponse(r)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"audit_id":"a-17","duration_ms":1234,"exit_code":1,"id":"5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84","outcome":"exit","rule":"git-read","signal":0,"stderr_base64":"/3g=","stderr_truncated":true,"stdout":"ok\n","stdout_truncated":false,"version":1}` + "\n"
	if string(out) != want {
		t.Errorf("got  %s\nwant %s", out, want)
	}
	back, err := ParseResponse(out)
	if err != nil {
		t.Fatal(err)
	}
	r.Version = 1
	if !reflect.DeepEqual(back, r) {
		t.Errorf("got %+v\nwant %+v", back, r)
	}
	if so, err := back.Stdout(); err != nil || string(so) != "ok\n" {
		t.Errorf("Stdout: %q, %v", so, err)
	}
	if se, err := back.Stderr(); err != nil || !bytes.Equal(se, []byte{0xff, 'x'}) {
		t.Errorf("Stderr: %q, %v", se, err)
	}
	// Empty output is written as empty text.
	e := &Response{ID: r.ID, Outcome: OutcomeExit, ExitCode: -1, Signal: 9}
	out, err = MarshalResponse(e)
	if err != nil || !strings.Contains(string(out), `"stderr":"",`) || !strings.Contains(string(out), `"stdout":"",`) {
		t.Errorf("empty output: %s, %v", out, err)
	}

	ref := &Response{ID: r.ID, Outcome: OutcomeRefused, Code: "policy-deny", Message: "no rule allows rm", AuditID: "a-18"}
	out, err = MarshalResponse(ref)
	if err != nil {
		t.Fatal(err)
	}
	want = `{"audit_id":"a-18","code":"policy-deny","duration_ms":0,"id":"5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84","message":"no rule allows rm","outcome":"refused","version":1}` + "\n"
	if string(out) != want {
		t.Errorf("got  %s\nwant %s", out, want)
	}
	back, err = ParseResponse(out)
	ref.Version = 1
	if err != nil || !reflect.DeepEqual(back, ref) {
		t.Errorf("refusal: %+v, %v", back, err)
	}
}

func TestResponseStrict(t *testing.T) {
	const id = `"id":"5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84"`
	for _, c := range []struct{ name, in string }{
		{"unknown outcome", `{"version":1,` + id + `,"outcome":"ok","exit_code":0}`},
		{"no outcome", `{"version":1,` + id + `,"exit_code":0}`},
		{"no exit_code", `{"version":1,` + id + `,"outcome":"exit"}`},
		{"refusal with exit_code", `{"version":1,` + id + `,"outcome":"refused","code":"policy-deny","message":"m","exit_code":0}`},
		{"refusal without message", `{"version":1,` + id + `,"outcome":"refused","code":"policy-deny"}`},
		{"refusal bad code", `{"version":1,` + id + `,"outcome":"refused","code":"Policy Deny","message":"m"}`},
		{"exit with code", `{"version":1,` + id + `,"outcome":"exit","exit_code":0,"code":"x"}`},
		{"both stdout forms", `{"version":1,` + id + `,"outcome":"exit","exit_code":0,"stdout":"","stdout_base64":"AA=="}`},
		{"bad base64", `{"version":1,` + id + `,"outcome":"exit","exit_code":0,"stderr_base64":"AA"}`},
		{"exit_code range", `{"version":1,` + id + `,"outcome":"exit","exit_code":256}`},
		{"negative duration", `{"version":1,` + id + `,"outcome":"exit","exit_code":0,"duration_ms":-1}`},
		{"unknown field", `{"version":1,` + id + `,"outcome":"exit","exit_code":0,"extra":1}`},
		{"version 2", `{"version":2,` + id + `,"outcome":"exit","exit_code":0}`},
		{"null", `{"version":1,` + id + `,"outcome":"exit","exit_code":0,"rule":null}`},
		{"duplicate", `{"version":1,` + id + `,"outcome":"exit","exit_code":0,"exit_code":1}`},
		{"too large", `{"version":1,` + id + `,"outcome":"exit","exit_code":0,"stdout":"` + strings.Repeat("x", MaxResponseSize) + `"}`},
		{"large YAML", "version: 1\nid: 5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84\noutcome: exit\nexit_code: 0\nstdout: " + strings.Repeat("x", MaxSize) + "\n"},
	} {
		if r, err := ParseResponse([]byte(c.in)); err == nil {
			t.Errorf("%s: accepted: %+v", c.name, r)
		} else if e := asError(t, err); e.Code != CodeBadRequest {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	// Large JSON responses (beyond MaxSize) are fine.
	big := `{"version":1,` + id + `,"outcome":"exit","exit_code":0,"stdout":"` + strings.Repeat("x", 3*MaxSize) + `"}`
	if r, err := ParseResponse([]byte(big)); err != nil || len(r.StdoutText) != 3*MaxSize {
		t.Errorf("large JSON response: %v", err)
	}
	for _, r := range []*Response{
		{ID: "x", Outcome: OutcomeExit},
		{ID: "5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84", Outcome: "done"},
		{ID: "5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84", Outcome: OutcomeRefused},
		{ID: "5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84", Outcome: OutcomeExit, StdoutText: "a", StdoutBase64: "YQ=="},
		{ID: "5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84", Outcome: OutcomeExit, StdoutText: "\xff"},
	} {
		if out, err := MarshalResponse(r); err == nil {
			t.Errorf("MarshalResponse(%+v) = %s", r, out)
		}
	}
}

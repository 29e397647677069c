package server_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/durationpb"

	"coily.dev/coily/audit"
	"coily.dev/coily/internal/testserver"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/recorder"
	"coily.dev/coily/refusal"
)

// withUnknown returns req carrying raw extra bytes, as a hostile or newer
// client could send them.
func withUnknown(req *coilyv1.ExecRequest, raw []byte) *coilyv1.ExecRequest {
	req.ProtoReflect().SetUnknown(raw)
	return req
}

func TestHostileExecRequests(t *testing.T) {
	in := testserver.Start(t, testserver.Options{})
	many := make([]string, 2000)
	for i := range many {
		many[i] = "x"
	}
	big := strings.Repeat("a", 100<<10)
	tests := []struct {
		name string
		req  *coilyv1.ExecRequest
	}{
		{"empty argv", &coilyv1.ExecRequest{}},
		{"too many args", &coilyv1.ExecRequest{Argv: append([]string{"/bin/echo"}, many...)}},
		{"argv too large", &coilyv1.ExecRequest{Argv: []string{"/bin/echo", big, big}}},
		{"NUL in argv", &coilyv1.ExecRequest{Argv: []string{"/bin/echo", "a\x00b"}}},
		{"NUL in binary", &coilyv1.ExecRequest{Argv: []string{"/bin/echo\x00/usr/bin/id"}}},
		{"relative binary", &coilyv1.ExecRequest{Argv: []string{"bin/echo", "hi"}}},
		{"relative path", &coilyv1.ExecRequest{Argv: []string{"./echo", "hi"}}},
		{"path-like name", &coilyv1.ExecRequest{Argv: []string{"bin/echo", "hi"}}},
		{"unclean binary", &coilyv1.ExecRequest{Argv: []string{"/bin/../bin/echo"}}},
		{"empty binary", &coilyv1.ExecRequest{Argv: []string{""}}},
		{"stdin over limit", &coilyv1.ExecRequest{Argv: []string{"/bin/true"}, Stdin: make([]byte, 1<<20+1)}},
		{"stdin over message limit", &coilyv1.ExecRequest{Argv: []string{"/bin/true"}, Stdin: make([]byte, 5<<20)}},
		{"negative timeout", &coilyv1.ExecRequest{Argv: []string{"/bin/true"}, Timeout: durationpb.New(-time.Second)}},
		{"huge timeout", &coilyv1.ExecRequest{Argv: []string{"/bin/true"}, Timeout: durationpb.New(1000 * time.Hour)}},
		{"invalid timeout", &coilyv1.ExecRequest{Argv: []string{"/bin/true"}, Timeout: &durationpb.Duration{Seconds: 1, Nanos: -5}}},
		{"note too long", &coilyv1.ExecRequest{Argv: []string{"/bin/true"}, Note: strings.Repeat("n", 2000)}},
		{"unknown field", withUnknown(&coilyv1.ExecRequest{Argv: []string{"/bin/true"}},
			protowire.AppendBytes(protowire.AppendTag(nil, 99, protowire.BytesType), []byte("workspace")))},
		{"invalid UTF-8 in argv", withUnknown(&coilyv1.ExecRequest{},
			protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte("/bin/\xff")))},
		{"env name with =", &coilyv1.ExecRequest{Argv: []string{"/bin/true"}, Env: map[string]string{"A=B": "x"}}},
		{"env name empty", &coilyv1.ExecRequest{Argv: []string{"/bin/true"}, Env: map[string]string{"": "x"}}},
		{"env value with NUL", &coilyv1.ExecRequest{Argv: []string{"/bin/true"}, Env: map[string]string{"A": "x\x00y"}}},
		{"env value too large", &coilyv1.ExecRequest{Argv: []string{"/bin/true"}, Env: map[string]string{"A": strings.Repeat("v", 40<<10)}}},
		{"too many env entries", &coilyv1.ExecRequest{Argv: []string{"/bin/true"}, Env: manyEnv(100)}},
		{"cwd with NUL", &coilyv1.ExecRequest{Argv: []string{"/bin/true"}, Cwd: "a\x00b"}},
		{"cwd too long", &coilyv1.ExecRequest{Argv: []string{"/bin/true"}, Cwd: strings.Repeat("d/", 3000)}},
		{"unknown verdict-like enum in a later field", withUnknown(&coilyv1.ExecRequest{Argv: []string{"/bin/true"}},
			protowire.AppendVarint(protowire.AppendTag(nil, 40, protowire.VarintType), 99))},
		{"malformed protobuf", withUnknown(&coilyv1.ExecRequest{Argv: []string{"/bin/true"}}, []byte{0x0a, 0x7f, 0x01})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := execReq(t, in, tt.req)
			wantCode(t, r.err, refusal.BadRequest)
		})
	}
	// The server still serves, and the refusals were audited without
	// echoing the hostile argv.
	if r := execArgv(t, in, "/bin/echo", "alive"); r.err != nil || r.stdout != "alive\n" {
		t.Fatalf("server no longer serves: %q %v", r.stdout, r.err)
	}
	in.Stop() // past a caller's budget, refusals are counted in a summary written by then
	recs, err := audit.Tail(in.StateDir+"/audit", 1000)
	if err != nil {
		t.Fatal(err)
	}
	// "stdin over message limit" is refused by gRPC's own 4 MiB message
	// limit before coily sees (or can audit) it.
	refused, want := 0, len(tests)-1
	for _, rec := range recs {
		switch {
		case rec.Event == recorder.EventRefusalSummary:
			n, _ := strconv.Atoi(rec.Details["count"])
			refused += n
		case rec.Code == string(refusal.BadRequest):
			refused++
			if len(rec.Argv) > 0 {
				t.Errorf("bad-request audit record echoes argv: %.80q", rec.Argv)
			}
		}
	}
	if refused != want {
		t.Errorf("%d bad-request refusals audited, want %d", refused, want)
	}
	if _, err := audit.Verify(in.StateDir + "/audit"); err != nil {
		t.Fatal(err)
	}
}

func TestHostileControlRequests(t *testing.T) {
	in := testserver.Start(t, testserver.Options{})
	ctx := context.Background()
	_, err := in.Client.API.Pause(ctx, &coilyv1.PauseRequest{Reason: strings.Repeat("r", 5000)})
	wantCode(t, refusal.FromStatus(err), refusal.BadRequest)
	req := &coilyv1.LockoutRequest{}
	req.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 7, protowire.VarintType), 1))
	_, err = in.Client.API.Lockout(ctx, req)
	wantCode(t, refusal.FromStatus(err), refusal.BadRequest)
	st, err := in.Client.API.Status(ctx, &coilyv1.StatusRequest{})
	if err != nil || st.GetLockout().GetActive() || st.GetPause().GetActive() {
		t.Fatalf("a refused control call changed state: %v %v", st, err)
	}
}

func manyEnv(n int) map[string]string {
	m := map[string]string{}
	for i := range n {
		m[fmt.Sprintf("V%d", i)] = "x"
	}
	return m
}

// An unknown value of a request enum is refused before anything happens.
func TestUnknownEnumRefused(t *testing.T) {
	in := testserver.Start(t, testserver.Options{})
	_, err := in.Client.API.Decide(context.Background(), &coilyv1.DecideRequest{Id: "x", Verdict: coilyv1.Verdict(7)})
	wantCode(t, refusal.FromStatus(err), refusal.BadRequest)
	_, err = in.Client.API.Decide(context.Background(), &coilyv1.DecideRequest{Id: "x"})
	wantCode(t, refusal.FromStatus(err), refusal.BadRequest)
}

// A refused decision is audited, and the refusal names its record, as
// every audited refusal does (docs/protocol.md, audit_id).
func TestRefusedDecisionNamesItsAuditRecord(t *testing.T) {
	in := testserver.Start(t, testserver.Options{})
	_, err := in.Client.API.Decide(context.Background(), &coilyv1.DecideRequest{Id: "no-such-approval", Verdict: coilyv1.Verdict_VERDICT_APPROVE})
	r := refusal.FromStatus(err)
	wantCode(t, r, refusal.BadRequest)
	id := refusal.As(r).AuditID
	if id == "" {
		t.Fatalf("refused Decide carries no audit_id: %v", err)
	}
	rec, err := audit.Find(filepath.Join(in.StateDir, "audit"), id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Event != "approval.decide" || rec.Decision != "refuse" || rec.Code != string(refusal.BadRequest) {
		t.Fatalf("record %s = %+v", id, rec)
	}
}

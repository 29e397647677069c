package fastexec

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	coilyv1 "coily.dev/coily/proto/coily/v1"
)

// TestWireMatchesGenerated: what this package encodes, the generated code
// decodes the same, and what the generated code (the server's) encodes,
// this package reads the same.
func TestWireMatchesGenerated(t *testing.T) {
	req := Request{Argv: []string{"gh", "issue", "create", "", "ünï\x00"}, Stdin: []byte("body\n")}
	var got coilyv1.ExecRequest
	if err := proto.Unmarshal(req.marshal(), &got); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.GetArgv(), req.Argv) || string(got.GetStdin()) != "body\n" {
		t.Errorf("ExecRequest read back as %v", &got)
	}

	expires := time.Date(2026, 11, 27, 4, 5, 6, 7, time.UTC)
	for _, tc := range []struct {
		name string
		msg  *coilyv1.ExecResponse
		want response
	}{
		{"started", &coilyv1.ExecResponse{Event: &coilyv1.ExecResponse_Started{Started: &coilyv1.ExecStarted{RequestId: "r", Rule: "gh", AuditId: "A1"}}}, response{}},
		{"stdout", out(coilyv1.Stream_STREAM_STDOUT, "hello"), response{output: []byte("hello")}},
		{"stderr", out(coilyv1.Stream_STREAM_STDERR, "oops"), response{output: []byte("oops"), stderr: true}},
		{"empty output", out(coilyv1.Stream_STREAM_STDOUT, ""), response{output: []byte{}}},
		{"exit", &coilyv1.ExecResponse{Event: &coilyv1.ExecResponse_Exit{Exit: &coilyv1.ExecExit{ExitCode: 3, Signal: 9, Duration: durationpb.New(time.Second),
			StdoutTruncated: true, AuditId: "A9", EgressDenied: []string{"evil.example:443 (not allowed)"}, SshAgentRefused: []string{"key", "two"}}}},
			response{exit: &Exit{Code: 3, Signal: 9, EgressDenied: []string{"evil.example:443 (not allowed)"}, SSHAgentRefused: []string{"key", "two"}}}},
		{"negative exit code", &coilyv1.ExecResponse{Event: &coilyv1.ExecResponse_Exit{Exit: &coilyv1.ExecExit{ExitCode: -1}}}, response{exit: &Exit{Code: -1}}},
		{"approval", &coilyv1.ExecResponse{Event: &coilyv1.ExecResponse_Approval{Approval: &coilyv1.Approval{Id: "ap1", Rule: "push", Argv: []string{"git", "push"},
			ExpiresAt: timestamppb.New(expires), Env: map[string]string{"A": "b"}}}}, response{approval: &Approval{ID: "ap1", Rule: "push", ExpiresAt: expires}}},
	} {
		b, err := proto.Marshal(tc.msg)
		if err != nil {
			t.Fatal(err)
		}
		r, err := unmarshalResponse(b)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !sameResponse(r, tc.want) {
			t.Errorf("%s: read %+v, want %+v", tc.name, r, tc.want)
		}
	}

	info, _ := anypb.New(&errdetails.ErrorInfo{Reason: "policy-deny", Domain: "coily.dev", Metadata: map[string]string{"x": "y", "audit_id": "A7"}})
	other, _ := anypb.New(&errdetails.ErrorInfo{Reason: "spoof", Domain: "elsewhere.example"})
	retry, _ := anypb.New(&errdetails.RetryInfo{RetryDelay: durationpb.New(1500 * time.Millisecond)})
	b, _ := proto.Marshal(&spb.Status{Code: 8, Message: "slow down", Details: []*anypb.Any{other, info, retry}})
	d, err := unmarshalStatus(b)
	if err != nil {
		t.Fatal(err)
	}
	if d != (statusDetails{code: 8, message: "slow down", reason: "policy-deny", domain: "coily.dev", retryAfter: 1500 * time.Millisecond}) {
		t.Errorf("status read as %+v", d)
	}
}

func out(s coilyv1.Stream, data string) *coilyv1.ExecResponse {
	return &coilyv1.ExecResponse{Event: &coilyv1.ExecResponse_Output{Output: &coilyv1.ExecOutput{Stream: s, Data: []byte(data)}}}
}

func sameResponse(a, b response) bool {
	if string(a.output) != string(b.output) || (a.output == nil) != (b.output == nil) || a.stderr != b.stderr {
		return false
	}
	if (a.exit == nil) != (b.exit == nil) || (a.approval == nil) != (b.approval == nil) {
		return false
	}
	if a.exit != nil && (a.exit.Code != b.exit.Code || a.exit.Signal != b.exit.Signal ||
		!slices.Equal(a.exit.EgressDenied, b.exit.EgressDenied) || !slices.Equal(a.exit.SSHAgentRefused, b.exit.SSHAgentRefused)) {
		return false
	}
	return a.approval == nil || (a.approval.ID == b.approval.ID && a.approval.Rule == b.approval.Rule && a.approval.ExpiresAt.Equal(b.approval.ExpiresAt))
}

// TestWireKnowsEveryField: every field of the messages this package reads
// is either read or named here as not needed, so a field added to the
// proto makes someone decide whether coily-exec must show it.
func TestWireKnowsEveryField(t *testing.T) {
	for _, tc := range []struct {
		msg           proto.Message
		read, ignored []protoreflect.FieldNumber
	}{
		{&coilyv1.ExecRequest{}, []protoreflect.FieldNumber{1, 2}, []protoreflect.FieldNumber{3, 4, 5, 6}}, // timeout, note, env, cwd: coily exec's flags (handed off)
		{&coilyv1.ExecResponse{}, []protoreflect.FieldNumber{2, 3, 4}, []protoreflect.FieldNumber{1}},      // started: nothing to show
		{&coilyv1.ExecOutput{}, []protoreflect.FieldNumber{1, 2}, nil},
		{&coilyv1.ExecExit{}, []protoreflect.FieldNumber{1, 2, 7, 8}, []protoreflect.FieldNumber{3, 4, 5, 6}}, // duration, truncation flags, audit id: coily exec shows none either
		{&coilyv1.Approval{}, []protoreflect.FieldNumber{1, 5, 7}, []protoreflect.FieldNumber{2, 3, 4, 6, 8, 9, 10, 11, 12, 13, 14, 15, 16}},
	} {
		fields := tc.msg.ProtoReflect().Descriptor().Fields()
		for i := range fields.Len() {
			n := fields.Get(i).Number()
			if !slices.Contains(tc.read, n) && !slices.Contains(tc.ignored, n) {
				t.Errorf("%s field %d (%s) is new: read it in wire.go or list it as not needed here",
					tc.msg.ProtoReflect().Descriptor().FullName(), n, fields.Get(i).Name())
			}
		}
	}
}

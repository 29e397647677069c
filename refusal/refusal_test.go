package refusal

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"
)

// codeConstants parses refusal.go and returns the names of the constants
// declared with type Code, so a constant added without a Codes() or
// grpcCodes entry fails the test.
func codeConstants(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "refusal.go", nil, 0)
	if err != nil {
		t.Fatalf("parse refusal.go: %v", err)
	}
	var names []string
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); ok && id.Name == "Code" {
				for _, n := range vs.Names {
					names = append(names, n.Name)
				}
			}
		}
	}
	return names
}

func TestCodesComplete(t *testing.T) {
	consts := codeConstants(t)
	if len(consts) != 19 {
		t.Errorf("found %d Code constants, want 19: %v", len(consts), consts)
	}
	all := Codes()
	if len(all) != len(consts) {
		t.Errorf("Codes() has %d entries, %d Code constants exist", len(all), len(consts))
	}
	if len(grpcCodes) != len(all) {
		t.Errorf("grpcCodes has %d entries, Codes() %d", len(grpcCodes), len(all))
	}
	seen := map[Code]bool{}
	for _, c := range all {
		if c == "" {
			t.Errorf("empty code in Codes()")
		}
		if seen[c] {
			t.Errorf("duplicate code %q in Codes()", c)
		}
		seen[c] = true
		gc, ok := grpcCodes[c]
		if !ok {
			t.Errorf("code %q has no grpcCodes entry", c)
			continue
		}
		if gc == codes.OK {
			t.Errorf("code %q maps to codes.OK", c)
		}
		if gc == codes.Internal && c != Internal {
			t.Errorf("code %q maps to codes.Internal", c)
		}
		if c.GRPCCode() != gc {
			t.Errorf("%q.GRPCCode() = %v, want %v", c, c.GRPCCode(), gc)
		}
	}
	if Code("no-such-code").GRPCCode() != codes.Internal {
		t.Errorf("unknown code does not map to Internal")
	}
}

func TestRoundTrip(t *testing.T) {
	for _, c := range Codes() {
		t.Run(string(c), func(t *testing.T) {
			err := Status(New(c, "msg %d", 1)).Err()
			if got := status.Code(err); got != c.GRPCCode() {
				t.Errorf("gRPC code %v, want %v", got, c.GRPCCode())
			}
			r := FromStatus(err)
			if r.Code != c {
				t.Errorf("Code = %q, want %q", r.Code, c)
			}
			if r.Msg != "msg 1" {
				t.Errorf("Msg = %q, want %q", r.Msg, "msg 1")
			}
			if r.RetryAfter != 0 {
				t.Errorf("RetryAfter = %v, want 0", r.RetryAfter)
			}
		})
	}
}

func TestRetryAfterRoundTrip(t *testing.T) {
	e := New(RateLimit, "slow down")
	e.RetryAfter = 7 * time.Second
	st := Status(e)
	if st.Code() != codes.ResourceExhausted {
		t.Errorf("gRPC code %v", st.Code())
	}
	r := FromStatus(st.Err())
	if r.Code != RateLimit || r.RetryAfter != 7*time.Second || r.Msg != "slow down" {
		t.Fatalf("FromStatus = %+v", r)
	}
	// Also through a wrapping error, and through the wire encoding.
	b, err := proto.Marshal(st.Proto())
	if err != nil {
		t.Fatal(err)
	}
	// errors.As-style unwrapping: status.FromError accepts wrapped statuses.
	r = FromStatus(fmt.Errorf("call: %w", statusFromBytes(t, b).Err()))
	if r.Code != RateLimit || r.RetryAfter != 7*time.Second {
		t.Fatalf("wrapped FromStatus = %+v", r)
	}
}

func TestAuditIDRoundTrip(t *testing.T) {
	orig := Wrap(PolicyDeny, errors.New("detail"), "no rule")
	err := WithAudit(orig, "A000000000007")
	if orig.AuditID != "" {
		t.Fatal("WithAudit changed its argument")
	}
	if !errors.Is(err, orig.Detail) {
		t.Fatal("WithAudit lost the detail")
	}
	r := FromStatus(Status(err).Err())
	if r.Code != PolicyDeny || r.Msg != "no rule" || r.AuditID != "A000000000007" {
		t.Fatalf("FromStatus = %+v", r)
	}
	if WithAudit(orig, "") != error(orig) || WithAudit(nil, "A1") != nil {
		t.Fatal("WithAudit without an id or an error changed it")
	}
	if r := FromStatus(Status(orig).Err()); r.AuditID != "" {
		t.Fatalf("audit_id from nowhere: %+v", r)
	}
}

func TestDetailNeverLeaks(t *testing.T) {
	for _, err := range []error{
		Wrap(Internal, errors.New("SECRET-detail"), "safe"),
		Wrap(PolicyDeny, errors.New("SECRET-detail"), "safe"),
		fmt.Errorf("outer: %w", Wrap(SandboxUnavailable, errors.New("SECRET-detail"), "safe")),
		errors.New("SECRET-plain"),
		fmt.Errorf("wrapped SECRET: %w", context.Canceled),
	} {
		st := Status(err)
		if strings.Contains(st.Message(), "SECRET") {
			t.Errorf("status message %q leaks detail", st.Message())
		}
		if strings.Contains(st.String(), "SECRET") {
			t.Errorf("status %q leaks detail", st.String())
		}
		for _, d := range st.Details() {
			if s := fmt.Sprint(d); strings.Contains(s, "SECRET") {
				t.Errorf("detail %q leaks", s)
			}
		}
		b, perr := proto.Marshal(st.Proto())
		if perr != nil {
			t.Fatal(perr)
		}
		if strings.Contains(string(b), "SECRET") {
			t.Errorf("wire encoding of %v leaks detail", err)
		}
	}
	if got := Status(Wrap(Internal, errors.New("SECRET-detail"), "safe")).Message(); got != "safe" {
		t.Errorf("message %q, want %q", got, "safe")
	}
}

func TestAs(t *testing.T) {
	plain := errors.New("boom")
	r := As(plain)
	if r.Code != Internal || r.Msg != "internal error" || r.Detail != plain {
		t.Errorf("As(plain) = %+v", r)
	}

	r = As(fmt.Errorf("exec: %w", context.Canceled))
	if r.Code != Internal || r.Msg != "request cancelled" || !errors.Is(r.Detail, context.Canceled) {
		t.Errorf("As(canceled) = %+v", r)
	}

	orig := New(LockoutActive, "locked")
	if got := As(fmt.Errorf("outer: %w", orig)); got != orig {
		t.Errorf("As(wrapped refusal) = %+v, want the refusal itself", got)
	}

	detail := fmt.Errorf("open: %w", errors.New("inner"))
	sentinel := errors.New("sentinel")
	wrapped := Wrap(CredentialUnavailable, fmt.Errorf("x: %w", sentinel), "no creds")
	if !errors.Is(wrapped, sentinel) {
		t.Errorf("errors.Is through Unwrap failed")
	}
	if !errors.Is(Wrap(Internal, detail, "x"), detail) {
		t.Errorf("errors.Is(refusal, detail) failed")
	}
	var target *Error
	if !errors.As(fmt.Errorf("z: %w", wrapped), &target) || target != wrapped {
		t.Errorf("errors.As to *Error failed")
	}
	if New(BadRequest, "x").Unwrap() != nil {
		t.Errorf("Unwrap of New is not nil")
	}
	if s := wrapped.Error(); !strings.Contains(s, "credential-unavailable") || !strings.Contains(s, "sentinel") {
		t.Errorf("Error() = %q lacks code or detail", s)
	}
}

func TestFromStatusPlain(t *testing.T) {
	for _, tc := range []struct {
		gc   codes.Code
		want Code
	}{
		{codes.Unauthenticated, Unauthenticated},
		{codes.PermissionDenied, PermissionDenied},
		{codes.InvalidArgument, BadRequest},
		{codes.Unavailable, Internal},
		{codes.DeadlineExceeded, Internal},
		{codes.Unknown, Internal},
	} {
		r := FromStatus(status.Error(tc.gc, "transport says no"))
		if r.Code != tc.want || r.Msg != "transport says no" {
			t.Errorf("%v: got %+v, want code %q", tc.gc, r, tc.want)
		}
	}
}

func TestFromStatusOtherDomain(t *testing.T) {
	st := withDetails(t, status.New(codes.PermissionDenied, "nope"),
		&errdetails.ErrorInfo{Reason: string(LockoutActive), Domain: "example.com"})
	if r := FromStatus(st.Err()); r.Code != PermissionDenied {
		t.Errorf("foreign ErrorInfo taken: %+v", r)
	}
	st = withDetails(t, status.New(codes.Unavailable, "nope"),
		&errdetails.ErrorInfo{Reason: string(LockoutActive), Domain: "example.com"})
	if r := FromStatus(st.Err()); r.Code != Internal {
		t.Errorf("foreign ErrorInfo taken: %+v", r)
	}
	// A coily ErrorInfo among foreign ones still wins.
	st = withDetails(t, status.New(codes.Unavailable, "nope"),
		&errdetails.ErrorInfo{Reason: "x", Domain: "example.com"},
		&errdetails.ErrorInfo{Reason: string(PauseActive), Domain: Domain},
	)
	if r := FromStatus(st.Err()); r.Code != PauseActive {
		t.Errorf("coily ErrorInfo not taken: %+v", r)
	}
}

func TestFromStatusNonStatus(t *testing.T) {
	plain := errors.New("dial failed")
	r := FromStatus(plain)
	if r.Code != Internal || r.Msg != "dial failed" || r.Detail != plain {
		t.Errorf("FromStatus(plain) = %+v", r)
	}
}

func withDetails(t testing.TB, st *status.Status, ds ...protoadapt.MessageV1) *status.Status {
	t.Helper()
	st, err := st.WithDetails(ds...)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func statusFromBytes(t testing.TB, b []byte) *status.Status {
	t.Helper()
	st, err := unmarshalStatus(b)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func FuzzFromStatus(f *testing.F) {
	for _, c := range Codes() {
		f.Add(uint32(c.GRPCCode()), "msg", string(c), Domain)
	}
	f.Add(uint32(codes.Unauthenticated), "", "lockout-active", "example.com")
	f.Add(uint32(0), "ok?", "internal", Domain)
	f.Add(uint32(codes.Internal), "\xff", "\xfe", Domain)
	f.Fuzz(func(t *testing.T, gc uint32, msg, reason, domain string) {
		code := codes.Code(gc % 17)
		st := status.New(code, msg)
		st2, err := st.WithDetails(
			&errdetails.ErrorInfo{Reason: reason, Domain: domain},
			&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(gc) * time.Millisecond)},
		)
		if err != nil {
			// Invalid UTF-8 in a proto3 string, or code OK: nothing to
			// send; FromStatus must still cope with the bare status.
			FromStatus(st.Err())
			return
		}
		b, err := proto.Marshal(st2.Proto())
		if err != nil {
			FromStatus(st2.Err())
			return
		}
		got, err := unmarshalStatus(b)
		if err != nil {
			t.Fatalf("unmarshal of marshalled status: %v", err)
		}
		r := FromStatus(got.Err())
		if r == nil {
			t.Fatal("FromStatus returned nil")
		}
		if code == codes.OK {
			// An OK status is not an error: Err() is nil and carries no
			// details.
			return
		}
		if domain == Domain && r.Code != Code(reason) {
			t.Errorf("Code = %q, want reason %q", r.Code, reason)
		}
		if domain != Domain && r.Code != fromGRPC(code) {
			t.Errorf("Code = %q, want %q from gRPC code %v", r.Code, fromGRPC(code), code)
		}
		if r.Msg != msg {
			t.Errorf("Msg = %q, want %q", r.Msg, msg)
		}
	})
}

// unmarshalStatus decodes a google.rpc.Status as a client receives it.
func unmarshalStatus(b []byte) (*status.Status, error) {
	var p spb.Status
	if err := proto.Unmarshal(b, &p); err != nil {
		return nil, err
	}
	return status.FromProto(&p), nil
}

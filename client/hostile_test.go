package client

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"runtime"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
)

func output(s string) []byte {
	return msg(&coilyv1.ExecResponse{Event: &coilyv1.ExecResponse_Output{Output: &coilyv1.ExecOutput{Stream: coilyv1.Stream_STREAM_STDOUT, Data: []byte(s)}}})
}

func exitEvent(code int32) []byte {
	return msg(&coilyv1.ExecResponse{Event: &coilyv1.ExecResponse_Exit{Exit: &coilyv1.ExecExit{ExitCode: code}}})
}

// refusalDetails is grpc-status-details-bin for a refusal of reason.
func refusalDetails(code codes.Code, reason string) string {
	info, _ := anypb.New(&errdetails.ErrorInfo{Reason: reason, Domain: refusal.Domain, Metadata: map[string]string{"audit_id": "A5"}})
	b, _ := proto.Marshal(&spb.Status{Code: int32(code), Message: "no rule allows it", Details: []*anypb.Any{info}})
	return base64.RawStdEncoding.EncodeToString(b)
}

// TestHostileServer: whatever comes back for an Exec ends the call with
// the exit event or the refusal that says what was wrong, never a hang, a
// panic or output taken from the wrong place. (TestHostileAnswers holds
// the gRPC layer below to the same; HTTP/2 framing is Go's.)
func TestHostileServer(t *testing.T) {
	grpcCT := http.Header{"Content-Type": {"application/grpc"}}
	ok := http.Header{"Grpc-Status": {"0"}}
	big := make([]byte, 5)
	binary.BigEndian.PutUint32(big[1:], DefaultMaxRecvSize+1)
	compressed := output("z")
	compressed[0] = 1
	for _, tc := range []struct {
		answer      hostileAnswer
		exit        int32 // -1: a refusal
		code        refusal.Code
		unreachable bool
		stdout      string
	}{
		{hostileAnswer{name: "exit", status: 200, header: grpcCT, body: append(output("hi"), exitEvent(7)...), trailer: ok}, 7, "", false, "hi"},
		{hostileAnswer{name: "refusal, trailers only", status: 200, header: http.Header{"Content-Type": {"application/grpc"},
			"Grpc-Status": {"7"}, "Grpc-Message": {"no%20rule"}, "Grpc-Status-Details-Bin": {refusalDetails(codes.PermissionDenied, "policy-deny")}}},
			-1, refusal.PolicyDeny, false, ""},
		{hostileAnswer{name: "refusal after output", status: 200, header: grpcCT, body: output("hi"),
			trailer: http.Header{"Grpc-Status": {"4"}, "Grpc-Status-Details-Bin": {refusalDetails(codes.DeadlineExceeded, "command-timeout")}}},
			-1, refusal.CommandTimeout, false, "hi"},
		{hostileAnswer{name: "OK without exit", status: 200, header: grpcCT, body: output("hi"), trailer: ok}, -1, refusal.Internal, false, "hi"},
		{hostileAnswer{name: "no status", status: 200, header: grpcCT, body: output("hi")}, -1, refusal.Internal, false, "hi"},
		{hostileAnswer{name: "HTTP 503", status: 503, header: grpcCT}, -1, refusal.Internal, true, ""},
		{hostileAnswer{name: "HTML", status: 200, header: http.Header{"Content-Type": {"text/html"}}, body: []byte("<html>")}, -1, refusal.Internal, false, ""},
		{hostileAnswer{name: "compressed", status: 200, header: grpcCT, body: compressed, trailer: ok}, -1, refusal.Internal, false, ""},
		{hostileAnswer{name: "message over 4 MiB", status: 200, header: grpcCT, body: big, trailer: ok}, -1, refusal.BadRequest, false, ""}, // as a refusal of ResourceExhausted reads
		{hostileAnswer{name: "garbage message", status: 200, header: grpcCT, body: []byte{0, 0, 0, 0, 2, 0xff, 0xff}, trailer: ok}, -1, refusal.Internal, false, ""},
		{hostileAnswer{name: "lost inside a message", status: 200, header: grpcCT, body: output("hi")[:6], trailer: ok}, -1, refusal.Internal, false, ""},
	} {
		t.Run(tc.answer.name, func(t *testing.T) {
			conn := hostileServer(t, func(string) hostileAnswer { return tc.answer })
			c := &Client{conn: conn, API: newAPI(conn)}
			var stdout bytes.Buffer
			exit, err := c.Exec(ctx(t), &coilyv1.ExecRequest{Argv: []string{"true"}}, &stdout, io.Discard)
			if stdout.String() != tc.stdout {
				t.Errorf("stdout %q, want %q", stdout.String(), tc.stdout)
			}
			if tc.exit >= 0 {
				if err != nil || exit.GetExitCode() != tc.exit {
					t.Fatalf("got %v, %v; want exit %d", exit, err, tc.exit)
				}
				return
			}
			r := refusal.As(err)
			if err == nil || r.Code != tc.code || Unreachable(err) != tc.unreachable {
				t.Fatalf("got %v (code %s, unreachable %v), want %s, unreachable %v", err, r.Code, Unreachable(err), tc.code, tc.unreachable)
			}
			if tc.code != refusal.Internal && tc.code != refusal.BadRequest && (r.Msg != "no rule allows it" || r.AuditID != "A5") {
				t.Errorf("the refusal's details were lost: %+v", r)
			}
		})
	}
}

// TestHeaderAmplification: one entry of hpack's table referenced by
// one-byte indices would decode a block of 1 MiB into ~250k fields (1 GB
// of header list): the client refuses the answer past its bound on
// headers (MaxResponseHeaderBytes) and allocates little; the same
// headers within the bound (200 references, 800 KB) are read.
func TestHeaderAmplification(t *testing.T) {
	for _, tc := range []struct {
		name string
		refs int
		ok   bool
	}{{"within the bound", 200, true}, {"1 MiB block", 1 << 20, false}} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := DialLocal(amplifier(t, tc.refs))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			exit, err := execWithin(t, ctx(t), 30*time.Second, c, &coilyv1.ExecRequest{Argv: []string{"true"}})
			runtime.ReadMemStats(&after)
			if tc.ok && (err != nil || exit.GetExitCode() != 0) || !tc.ok && !Unreachable(err) {
				t.Errorf("%d references: %v, %v", tc.refs, exit, err)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32<<20 {
				t.Errorf("the answer allocated %d MB", alloc>>20)
			}
		})
	}
}

// amplifier is a server whose answer's headers hold a 4000-byte field
// and refs one-byte references to it, in frames of 16 KiB; then an exit
// event and OK.
func amplifier(t *testing.T, refs int) string {
	return rawServer(t, func(c net.Conn, f *http2.Framer) {
		var blk bytes.Buffer
		enc := hpack.NewEncoder(&blk)
		_ = enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
		_ = enc.WriteField(hpack.HeaderField{Name: "content-type", Value: "application/grpc"})
		_ = enc.WriteField(hpack.HeaderField{Name: "x", Value: string(bytes.Repeat([]byte{'a'}, 4000))}) // the newest entry: 62
		block := append(bytes.Clone(blk.Bytes()), bytes.Repeat([]byte{0x80 | 62}, refs)...)
		_ = f.WriteSettings()
		for { // up to the request's headers
			fr, err := f.ReadFrame()
			if err != nil {
				return
			}
			if _, ok := fr.(*http2.HeadersFrame); ok {
				break
			}
		}
		go func() { _, _ = io.Copy(io.Discard, c) }()
		const frame = 16 << 10
		first := block[:min(frame, len(block))]
		if f.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: first, EndHeaders: len(first) == len(block)}) != nil {
			return
		}
		for rest := block[len(first):]; len(rest) > 0; {
			n := min(frame, len(rest))
			if f.WriteContinuation(1, n == len(rest), rest[:n]) != nil {
				return
			}
			rest = rest[n:]
		}
		blk.Reset()
		_ = enc.WriteField(hpack.HeaderField{Name: "grpc-status", Value: "0"})
		_ = f.WriteData(1, false, exitEvent(0))
		_ = f.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: blk.Bytes(), EndHeaders: true, EndStream: true})
		<-t.Context().Done()
	})
}

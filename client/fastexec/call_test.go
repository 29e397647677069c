package fastexec

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2/hpack"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	coilyv1 "coily.dev/coily/proto/coily/v1"
)

// A server's side of a connection, frame by frame.

func srvFrame(typ, flags byte, stream uint32, p []byte) []byte {
	b := []byte{byte(len(p) >> 16), byte(len(p) >> 8), byte(len(p)), typ, flags}
	b = binary.BigEndian.AppendUint32(b, stream)
	return append(b, p...)
}

func block(kv ...string) []byte {
	var b headerBuf
	enc := hpack.NewEncoder(&b)
	for i := 0; i+1 < len(kv); i += 2 {
		_ = enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return b
}

func grpcMsg(m proto.Message) []byte {
	b, _ := proto.Marshal(m)
	return append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(b))), b...)
}

var (
	settings   = srvFrame(frameSettings, 0, 0, nil)
	okHeaders  = srvFrame(frameHeaders, flagEndHeaders, 1, block(":status", "200", "content-type", "application/grpc"))
	okTrailers = srvFrame(frameHeaders, flagEndHeaders|flagEndStream, 1, block("grpc-status", "0"))
	hiOut      = srvFrame(frameData, 0, 1, grpcMsg(out(coilyv1.Stream_STREAM_STDOUT, "hi")))
	exit7      = srvFrame(frameData, 0, 1, grpcMsg(&coilyv1.ExecResponse{Event: &coilyv1.ExecResponse_Exit{Exit: &coilyv1.ExecExit{ExitCode: 7}}}))
)

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func details(code int32, reason string) string {
	info, _ := anypb.New(&errdetails.ErrorInfo{Reason: reason, Domain: refusalDomain, Metadata: map[string]string{"audit_id": "A5"}})
	b, _ := proto.Marshal(&spb.Status{Code: code, Message: "no rule allows it", Details: []*anypb.Any{info}})
	return base64.RawStdEncoding.EncodeToString(b)
}

type serverCase struct {
	name   string
	server []byte
	code   int32 // -1: an exit event
	exit   int32
	reason string
	stdout string
}

func serverCases() []serverCase {
	big := make([]byte, 5)
	binary.BigEndian.PutUint32(big[1:], MaxMessage+1)
	compressed := grpcMsg(out(coilyv1.Stream_STREAM_STDOUT, "z"))
	compressed[0] = 1
	half := grpcMsg(out(coilyv1.Stream_STREAM_STDOUT, "a longer output"))
	var flood [][]byte
	flood = append(flood, srvFrame(frameHeaders, 0, 1, block(":status", "200")))
	for range 70 {
		flood = append(flood, srvFrame(frameContinuation, 0, 1, make([]byte, maxFrame)))
	}
	padded := append([]byte{3}, grpcMsg(out(coilyv1.Stream_STREAM_STDOUT, "hi"))...)
	padded = append(padded, 0, 0, 0)
	return []serverCase{
		{"exit", cat(settings, okHeaders, hiOut, exit7), -1, 7, "", "hi"},
		{"padded data and pings", cat(settings, srvFrame(framePing, 0, 0, make([]byte, 8)), okHeaders,
			srvFrame(frameData, flagPadded, 1, padded), srvFrame(frameData, 0, 3, []byte("other stream")), exit7), -1, 7, "", "hi"},
		{"refusal, trailers only", cat(settings, srvFrame(frameHeaders, flagEndHeaders|flagEndStream, 1,
			block(":status", "200", "content-type", "application/grpc", "grpc-status", "7", "grpc-message", "no%20rule", "grpc-status-details-bin", details(7, "policy-deny")))), 7, 0, "policy-deny", ""},
		{"refusal after output", cat(settings, okHeaders, hiOut, srvFrame(frameHeaders, flagEndHeaders|flagEndStream, 1,
			block("grpc-status", "4", "grpc-message", "timed out", "grpc-status-details-bin", details(4, "command-timeout")))), 4, 0, "command-timeout", "hi"},
		{"details of another code", cat(settings, okHeaders, srvFrame(frameHeaders, flagEndHeaders|flagEndStream, 1,
			block("grpc-status", "0", "grpc-status-details-bin", details(7, "policy-deny")))), codeInternal, 0, "", ""},
		{"details not base64", cat(settings, okHeaders, srvFrame(frameHeaders, flagEndHeaders|flagEndStream, 1,
			block("grpc-status", "7", "grpc-status-details-bin", "!!"))), codeInternal, 0, "", ""},
		{"OK without exit", cat(settings, okHeaders, hiOut, okTrailers), codeInternal, 0, "", "hi"},
		{"no status", cat(settings, okHeaders, srvFrame(frameHeaders, flagEndHeaders|flagEndStream, 1, block("x", "y"))), codeInternal, 0, "", ""},
		{"status not a number", cat(settings, okHeaders, srvFrame(frameHeaders, flagEndHeaders|flagEndStream, 1, block("grpc-status", "-1"))), codeInternal, 0, "", ""},
		{"data ends the stream", cat(settings, okHeaders, srvFrame(frameData, flagEndStream, 1, nil)), codeInternal, 0, "", ""},
		{"HTTP 503", cat(settings, srvFrame(frameHeaders, flagEndHeaders, 1, block(":status", "503"))), codeUnavailable, 0, "", ""},
		{"HTTP 404", cat(settings, srvFrame(frameHeaders, flagEndHeaders, 1, block(":status", "404"))), 12, 0, "", ""},
		{"HTML", cat(settings, srvFrame(frameHeaders, flagEndHeaders, 1, block(":status", "200", "content-type", "text/html"))), codeUnknown, 0, "", ""},
		{"compressed", cat(settings, okHeaders, srvFrame(frameData, 0, 1, compressed)), codeInternal, 0, "", ""},
		{"message over 4 MiB", cat(settings, okHeaders, srvFrame(frameData, 0, 1, big)), codeResourceExhausted, 0, "", ""},
		{"garbage message", cat(settings, okHeaders, srvFrame(frameData, 0, 1, []byte{0, 0, 0, 0, 2, 0xff, 0xff})), codeInternal, 0, "", ""},
		{"reset: cancel", cat(settings, okHeaders, srvFrame(frameRSTStream, 0, 1, be32(errCancel))), codeCanceled, 0, "", ""},
		{"reset: refused", cat(settings, srvFrame(frameRSTStream, 0, 1, be32(7))), codeUnavailable, 0, "", ""},
		{"reset: internal", cat(settings, okHeaders, srvFrame(frameRSTStream, 0, 1, be32(2))), codeInternal, 0, "", ""},
		{"goaway before the stream", cat(settings, srvFrame(frameGoAway, 0, 0, make([]byte, 8))), codeUnavailable, 0, "", ""},
		{"lost inside a message", cat(settings, okHeaders, hiOut[:len(hiOut)-3]), codeUnavailable, 0, "", ""},
		{"lost mid-frame", cat(settings, okHeaders, srvFrame(frameData, 0, 1, half[:8])[:12]), codeUnavailable, 0, "", ""},
		{"not HTTP/2", []byte("HTTP/1.1 400 Bad Request\r\n\r\n"), codeUnavailable, 0, "", ""},
		{"frame over the maximum", cat(settings, srvFrame(frameData, 0, 1, make([]byte, maxFrame+1))), codeUnavailable, 0, "", ""},
		{"push promise", cat(settings, srvFrame(framePushPromise, flagEndHeaders, 1, make([]byte, 4))), codeUnavailable, 0, "", ""},
		{"continuation alone", cat(settings, srvFrame(frameContinuation, flagEndHeaders, 1, nil)), codeUnavailable, 0, "", ""},
		{"header flood", cat(append([][]byte{settings}, flood...)...), codeUnavailable, 0, "", ""},
		{"data before headers", cat(settings, hiOut), codeUnavailable, 0, "", ""},
		{"bad padding", cat(settings, okHeaders, srvFrame(frameData, flagPadded, 1, []byte{9, 1})), codeUnavailable, 0, "", ""},
		{"bad settings", cat(srvFrame(frameSettings, 0, 0, []byte{1, 2, 3})), codeUnavailable, 0, "", ""},
		{"window over 2^31", cat(settings, srvFrame(frameWindowUpdate, 0, 0, be32(1<<31-1))), codeUnavailable, 0, "", ""},
		{"bad hpack", cat(settings, srvFrame(frameHeaders, flagEndHeaders, 1, []byte{0xff, 0xff, 0xff})), codeUnavailable, 0, "", ""},
		{"nothing", nil, codeUnavailable, 0, "", ""},
	}
}

// readAnswer runs the client's reading of an answer on server's bytes.
func readAnswer(server []byte) (*Exit, string, error) {
	var stdout bytes.Buffer
	h := newH2(bytes.NewReader(server), io.Discard)
	exit, err := Call{Stdout: &stdout, Stderr: io.Discard}.read(context.Background(), h)
	return exit, stdout.String(), err
}

// TestHostileServer: whatever comes back on the socket ends the call with
// the status that says what was wrong, never a hang, a panic or output
// taken from the wrong place.
func TestHostileServer(t *testing.T) {
	for _, tc := range serverCases() {
		t.Run(tc.name, func(t *testing.T) {
			exit, stdout, err := readAnswer(tc.server)
			if stdout != tc.stdout {
				t.Errorf("stdout %q, want %q", stdout, tc.stdout)
			}
			if tc.code == -1 {
				if err != nil || exit == nil || exit.Code != tc.exit {
					t.Fatalf("got %v, %v; want exit %d", exit, err, tc.exit)
				}
				return
			}
			st, ok := err.(*StatusError)
			if !ok || st.Code != tc.code || st.Reason != tc.reason {
				t.Fatalf("got %#v (%v), want code %d reason %q", err, err, tc.code, tc.reason)
			}
			if tc.reason != "" && !strings.Contains(st.Message, "no rule allows it") {
				t.Errorf("details lost: %+v", st)
			}
		})
	}
}

// FuzzServerAnswer: any bytes from the server end the call without a
// panic, with an exit event or a status.
func FuzzServerAnswer(f *testing.F) {
	for _, tc := range serverCases() {
		f.Add(tc.server)
	}
	f.Fuzz(func(t *testing.T, server []byte) {
		exit, _, err := readAnswer(server)
		if (exit == nil) == (err == nil) {
			t.Fatalf("exit %v and error %v", exit, err)
		}
	})
}

// TestSilentSocket: something on the socket that accepts and says nothing
// fails the call as unreachable once the first-frame bound passes; no
// socket at all fails at once, the same way.
func TestSilentSocket(t *testing.T) {
	sock := t.TempDir() + "/s.sock"
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	start := time.Now()
	_, err = Call{Socket: sock, Stdout: io.Discard, Stderr: io.Discard, FirstFrame: 200 * time.Millisecond}.Exec(context.Background(), Request{Argv: []string{"true"}})
	if st, ok := err.(*StatusError); !ok || !st.Unreachable() || time.Since(start) > 10*time.Second {
		t.Errorf("a silent socket: %v after %v", err, time.Since(start))
	}
	_, err = Call{Socket: sock + ".none", Stdout: io.Discard, Stderr: io.Discard}.Exec(context.Background(), Request{Argv: []string{"true"}})
	if st, ok := err.(*StatusError); !ok || !st.Unreachable() || !strings.Contains(st.Message, "connect: no such file") {
		t.Errorf("no socket: %v", err)
	}
}

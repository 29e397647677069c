package grpcwire

import (
	"bytes"
	"testing"
)

var messages = map[string]string{
	"plain": "plain", "100%25": "100%", "%C3%BC": "ü", "bad%zz": "bad%zz", "end%4": "end%4", "%": "%", "%%41": "%A",
	"%0A%1B[2J": "\n\x1b[2J", // decoded as sent: the clients escape it when they print it
}

func TestDecodeMessage(t *testing.T) {
	for in, want := range messages {
		if got := DecodeMessage(in); got != want {
			t.Errorf("DecodeMessage(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDecodeBinary(t *testing.T) {
	for in, want := range map[string][]byte{"AAEC": {0, 1, 2}, "AAE": {0, 1}, "AAE=": {0, 1}, "": {}} {
		if got, err := DecodeBinary(in); err != nil || !bytes.Equal(got, want) {
			t.Errorf("DecodeBinary(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"!!", "A", "AA=A", "AAE==", "ÿÿÿÿ"} {
		if _, err := DecodeBinary(bad); err == nil {
			t.Errorf("DecodeBinary(%q) accepted", bad)
		}
	}
}

func TestHTTPCodeAndContentType(t *testing.T) {
	for status, want := range map[int]uint32{400: Internal, 401: Unauthenticated, 403: PermissionDenied, 404: Unimplemented,
		429: Unavailable, 502: Unavailable, 503: Unavailable, 504: Unavailable, 500: Unknown, 302: Unknown, 0: Unknown} {
		if got := HTTPCode(status); got != want {
			t.Errorf("HTTPCode(%d) = %d, want %d", status, got, want)
		}
	}
	for ct, want := range map[string]bool{"application/grpc": true, "application/grpc+proto": true, "application/grpc; charset=utf-8": true,
		"application/grpc-web": false, "application/grpcx": false, "text/html": false, "": false, "APPLICATION/GRPC": false} {
		if got := IsContentType(ct); got != want {
			t.Errorf("IsContentType(%q) = %v, want %v", ct, got, want)
		}
	}
}

// FuzzDecodeMessage: any header value decodes without a panic, to no more
// bytes than it had, and text without a valid escape comes back as it is.
func FuzzDecodeMessage(f *testing.F) {
	for in := range messages {
		f.Add(in)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out := DecodeMessage(in)
		if len(out) > len(in) {
			t.Fatalf("%q decoded to %q, longer", in, out)
		}
		if !bytes.Contains([]byte(in), []byte("%")) && out != in {
			t.Fatalf("%q without an escape changed to %q", in, out)
		}
	})
}

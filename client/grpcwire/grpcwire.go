// Package grpcwire holds the parts of gRPC's HTTP/2 protocol
// (https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md) that
// both of coily's clients read from the server's answer: client/grpclite
// over net/http, and client/fastexec, which writes HTTP/2 itself. It
// links the standard library only (coily-exec must stay small).
package grpcwire

import (
	"encoding/base64"
	"strconv"
	"strings"
)

// gRPC status codes, as google.golang.org/grpc/codes numbers them.
const (
	OK                = 0
	Canceled          = 1
	Unknown           = 2
	InvalidArgument   = 3
	PermissionDenied  = 7
	ResourceExhausted = 8
	Unimplemented     = 12
	Internal          = 13
	Unavailable       = 14
	Unauthenticated   = 16
)

// IsContentType says whether ct is gRPC's content type
// (application/grpc, or with a +codec or parameters).
func IsContentType(ct string) bool {
	return ct == "application/grpc" || strings.HasPrefix(ct, "application/grpc+") || strings.HasPrefix(ct, "application/grpc;")
}

// HTTPCode is the gRPC code of an answer whose HTTP status is not 200, as
// the gRPC spec maps them (http-grpc-status-mapping.md).
func HTTPCode(status int) uint32 {
	switch status {
	case 400:
		return Internal
	case 401:
		return Unauthenticated
	case 403:
		return PermissionDenied
	case 404:
		return Unimplemented
	case 429, 502, 503, 504:
		return Unavailable
	}
	return Unknown
}

// DecodeBinary reads a -bin header's value: base64, padded or not.
func DecodeBinary(v string) ([]byte, error) {
	if len(v)%4 == 0 {
		return base64.StdEncoding.DecodeString(v)
	}
	return base64.RawStdEncoding.DecodeString(v)
}

// DecodeMessage undoes grpc-message's percent-encoding; a malformed
// escape is kept as it is, as grpc-go does.
func DecodeMessage(v string) string {
	if !strings.Contains(v, "%") {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '%' && i+2 < len(v) {
			if n, err := strconv.ParseUint(v[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(n))
				i += 2
				continue
			}
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

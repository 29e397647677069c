package standin

import (
	"encoding/hex"
	"encoding/xml"
	"net/http"
	"strings"
)

// Real S3 quotes a refused request's credentials back in its error body:
// SignatureDoesNotMatch carries the access key id, the string to sign and
// the canonical request it computed (every signed header, the session
// token among them), in text and as hex bytes; InvalidAccessKeyId the key
// id; InvalidToken and ExpiredToken the token, as Token-0. The stand-in
// answers the same, so that a test through a credential-injecting proxy
// sees what a leak of the real key through such an echo would look like.

// s3AuthError is S3's error body for a request refused at
// authentication.
type s3AuthError struct {
	XMLName               xml.Name `xml:"Error"`
	Code                  string
	Message               string
	AWSAccessKeyID        string `xml:"AWSAccessKeyId,omitempty"`
	StringToSign          string `xml:",omitempty"`
	SignatureProvided     string `xml:",omitempty"`
	StringToSignBytes     string `xml:",omitempty"`
	CanonicalRequest      string `xml:",omitempty"`
	CanonicalRequestBytes string `xml:",omitempty"`
	Token0                string `xml:"Token-0,omitempty"`
	RequestID             string `xml:"RequestId"`
	HostID                string `xml:"HostId"`
}

// writeAuthError answers r, refused with code, as S3 does.
func writeAuthError(w http.ResponseWriter, r *http.Request, code, bodyHash string) {
	e := s3AuthError{Code: code, Message: s3Messages[code], RequestID: "STANDINREQUEST01", HostID: "standin-host-id"}
	a, _ := parseSigV4Auth(r.Header.Get("Authorization"))
	switch code {
	case "SignatureDoesNotMatch":
		payload := r.Header.Get("X-Amz-Content-Sha256")
		if payload == "" {
			payload = bodyHash
		}
		canon, toSign := signedStrings(r, a, payload)
		e.AWSAccessKeyID, e.SignatureProvided = a.AccessKey, a.Signature
		e.CanonicalRequest, e.CanonicalRequestBytes = canon, hexBytes(canon)
		e.StringToSign, e.StringToSignBytes = toSign, hexBytes(toSign)
	case "InvalidAccessKeyId":
		e.AWSAccessKeyID = a.AccessKey
	case "InvalidToken", "ExpiredToken":
		e.Token0 = r.Header.Get("X-Amz-Security-Token")
	}
	writeXML(w, http.StatusForbidden, e)
}

// hexBytes is s as S3 writes its *Bytes fields: "47 45 54 0a …".
func hexBytes(s string) string {
	parts := make([]string, len(s))
	for i := range len(s) {
		parts[i] = hex.EncodeToString([]byte{s[i]})
	}
	return strings.Join(parts, " ")
}

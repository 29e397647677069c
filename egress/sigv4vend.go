package egress

import (
	"net/url"
	"strings"
)

// A key the proxy re-signs with must not buy the child a key it would
// hold itself: STS, IAM, SSO and Cognito answer credentials (a new access
// key id, secret and session token) that reach the child as they are,
// since the proxy knows only the secrets it injected, and that the child
// can then sign with in the open (they are no placeholder). So the proxy
// re-signs no request to a service whose business is credentials, and of
// STS only the calls that answer none; S3's CreateSession (`?session`,
// S3 Express) is refused the same way. Other services that answer
// tokens (ECR's and CodeArtifact's GetAuthorizationToken, Redshift's
// GetClusterCredentials) are the key's IAM policy's to deny: docs/egress.md.

// vendingServices are the SigV4 service names whose calls issue
// credentials; the proxy re-signs none of them.
var vendingServices = map[string]bool{
	"iam": true, "sso": true, "sso-oauth": true, "awsssoportal": true, "cognito-identity": true,
	"cognito-idp": true, "s3express": true, "signin": true,
}

// stsAllowed are the STS actions that answer no credentials.
var stsAllowed = map[string]bool{"GetCallerIdentity": true, "GetAccessKeyInfo": true}

// checkVendingService refuses a request signed for a service that issues
// credentials, S3's CreateSession, an STS request whose body the proxy
// does not buffer (it must read the action: STS names no payload hash),
// and UNSIGNED-PAYLOAD (or STREAMING-UNSIGNED-PAYLOAD-TRAILER) to a
// service other than S3 (which would refuse
// the signature and quote the canonical request back).
func checkVendingService(service, rawQuery, payload string) error {
	switch {
	case vendingServices[service]:
		return sigV4Refusal("the proxy does not re-sign requests to AWS %s: its calls answer credentials the command would then hold; "+
			"keep a key for it in the command's environment", service)
	case service == "s3" && hasQueryKey(rawQuery, "session"):
		return sigV4Refusal("the proxy does not re-sign S3 CreateSession (?session): it answers credentials the command would then hold")
	case (payload == unsignedPayload || payload == streamingUnsignedTrailer) && service != "s3":
		return sigV4Refusal("%s is S3's; a request to AWS %s signs its body's hash", payload, service)
	case service == "sts" && payload != "":
		return sigV4Refusal("an STS request must name no X-Amz-Content-Sha256 (the proxy reads its body to check its action)")
	}
	return nil
}

// checkSTSAction refuses an STS request whose action (in the query, or
// in a form body) is not one of stsAllowed, or that names none, or two.
func checkSTSAction(rawQuery string, body []byte) error {
	var actions []string
	for _, raw := range []string{rawQuery, string(body)} {
		v, err := url.ParseQuery(raw)
		if err != nil {
			return sigV4Refusal("the STS request's parameters cannot be read")
		}
		actions = append(actions, v["Action"]...)
	}
	switch {
	case len(actions) != 1:
		return sigV4Refusal("an STS request must name one Action, not %d", len(actions))
	case !stsAllowed[actions[0]]:
		return sigV4Refusal("the proxy does not re-sign STS %.64q: it answers credentials the command would then hold (only GetCallerIdentity and GetAccessKeyInfo are re-signed)", actions[0])
	}
	return nil
}

// hasQueryKey reports a parameter named key in rawQuery, with or without
// a value, in any escaping.
func hasQueryKey(rawQuery, key string) bool {
	for _, kv := range strings.FieldsFunc(rawQuery, func(r rune) bool { return r == '&' || r == ';' }) {
		k, _, _ := strings.Cut(kv, "=")
		if u, err := url.QueryUnescape(k); err == nil && strings.EqualFold(u, key) || strings.EqualFold(k, key) {
			return true
		}
	}
	return false
}

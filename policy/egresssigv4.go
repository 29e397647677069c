package policy

import (
	"fmt"
	"slices"

	"coily.dev/coily/egress"
)

// The variables of a sigv4 injection: the AWS CLI and SDKs read a key
// from them.
const (
	AWSAccessKeyIDEnv     = "AWS_ACCESS_KEY_ID"
	AWSSecretAccessKeyEnv = "AWS_SECRET_ACCESS_KEY"
	AWSSessionTokenEnv    = "AWS_SESSION_TOKEN"
)

// SigV4Group is the sigv4 injection of one host, port and path prefix:
// the entries of its key id, secret and (for a temporary key) session
// token.
type SigV4Group struct {
	KeyID, Secret Inject
	Token         *Inject // nil for a long-term key
}

// SigV4Groups gathers the sigv4 entries of inject by host, port and path:
// each group names AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY once, and
// AWS_SESSION_TOKEN at most once; no other variable takes the form.
func SigV4Groups(inject []Inject) ([]SigV4Group, error) {
	type at struct {
		host string
		port int
		path string
	}
	byAt := map[at]map[string]Inject{}
	var order []at
	for _, in := range inject {
		if in.Form != egress.FormSigV4 {
			continue
		}
		if !slices.Contains([]string{AWSAccessKeyIDEnv, AWSSecretAccessKeyEnv, AWSSessionTokenEnv}, in.Env) {
			return nil, fmt.Errorf("egress inject: form sigv4 is for %s, %s and %s, not %s", AWSAccessKeyIDEnv, AWSSecretAccessKeyEnv, AWSSessionTokenEnv, in.Env)
		}
		k := at{in.Host, in.Port, in.Path}
		if byAt[k] == nil {
			byAt[k] = map[string]Inject{}
			order = append(order, k)
		}
		if _, dup := byAt[k][in.Env]; dup {
			return nil, fmt.Errorf("egress inject: %s is injected twice to %s", in.Env, in.HostPort())
		}
		byAt[k][in.Env] = in
	}
	var out []SigV4Group
	for _, k := range order {
		m := byAt[k]
		id, okID := m[AWSAccessKeyIDEnv]
		sec, okSec := m[AWSSecretAccessKeyEnv]
		if !okID || !okSec {
			return nil, fmt.Errorf("egress inject: sigv4 to %s needs both %s and %s", k.host, AWSAccessKeyIDEnv, AWSSecretAccessKeyEnv)
		}
		g := SigV4Group{KeyID: id, Secret: sec}
		if tok, ok := m[AWSSessionTokenEnv]; ok {
			g.Token = &tok
		}
		out = append(out, g)
	}
	return out, nil
}

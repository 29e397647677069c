package keystore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/vault/api"
)

// read reads ref with s's token.
func (v *Vault) read(ctx context.Context, s *vaultSession, ref Ref) (string, error) {
	mount, version, err := v.mount(ctx, s, ref.Path)
	if err != nil {
		return "", err
	}
	rest := strings.TrimSuffix(strings.TrimPrefix(ref.Path+"/", mount), "/")
	if rest == "" {
		return "", fmt.Errorf("%w: %s is a mount, not a secret", ErrNotFound, strings.TrimSuffix(mount, "/"))
	}
	apiPath := mount + rest
	if version == 2 {
		apiPath = mount + "data/" + rest
	}
	sec, err := s.client.Logical().ReadWithContext(ctx, apiPath)
	if err != nil {
		return "", v.classify(ctx, "read of "+apiPath, err, s.token)
	}
	if sec == nil || sec.Data == nil {
		return "", fmt.Errorf("%w: no secret at %s", ErrNotFound, apiPath)
	}
	data := sec.Data
	if version == 2 {
		d, _ := sec.Data["data"].(map[string]any)
		if d == nil {
			return "", fmt.Errorf("%w: no current version of the secret at %s (deleted or destroyed)", ErrNotFound, apiPath)
		}
		data = d
	}
	raw, ok := data[ref.Field]
	if !ok {
		return "", fmt.Errorf("%w: the secret at %s has no field %q", ErrNotFound, apiPath, ref.Field)
	}
	val, ok := raw.(string)
	if !ok {
		return "", fmt.Errorf("%w: field %q of the secret at %s is not a string", ErrNotFound, ref.Field, apiPath)
	}
	return val, nil
}

// mount returns the mount path (with a trailing "/") holding path and its
// KV version, asking Vault the way the CLI does (the preflight).
func (v *Vault) mount(ctx context.Context, s *vaultSession, path string) (string, int, error) {
	v.mu.Lock()
	best := ""
	for m := range v.mounts {
		if strings.HasPrefix(path+"/", m) && len(m) > len(best) {
			best = m
		}
	}
	version := v.mounts[best]
	v.mu.Unlock()
	if best != "" {
		return best, version, nil
	}
	first, _, _ := strings.Cut(path, "/")
	sec, err := s.client.Logical().ReadWithContext(ctx, "sys/internal/ui/mounts/"+path)
	if err != nil {
		var re *api.ResponseError
		if errors.As(err, &re) && re.StatusCode == 403 && !mentions(re, "invalid token") {
			// Refused (the token may read the secret but not see its
			// mount): assume KV v2 at the first segment.
			return first + "/", 2, nil
		}
		return "", 0, v.classify(ctx, "mount lookup (sys/internal/ui/mounts)", err, s.token)
	}
	if sec == nil {
		// 404: a Vault without the preflight endpoint: KV v1, as the CLI.
		return first + "/", 1, nil
	}
	m, _ := sec.Data["path"].(string)
	version = 1
	if opts, ok := sec.Data["options"].(map[string]any); ok {
		if ver, _ := opts["version"].(string); ver == "2" {
			version = 2
		}
	}
	if m == "" || !strings.HasSuffix(m, "/") || !strings.HasPrefix(path+"/", m) {
		return first + "/", version, nil // unexpected answer: don't cache it
	}
	v.mu.Lock()
	v.mounts[m] = version
	v.mu.Unlock()
	return m, version, nil
}

// tokenInvalid reports whether a 403 came from s's token being invalid
// (expired or revoked) rather than from a policy: Vault says "invalid
// token", or refuses the token's own lookup-self, which every token that
// passed NewVault could do.
func (v *Vault) tokenInvalid(ctx context.Context, s *vaultSession, re *api.ResponseError) bool {
	if re != nil && mentions(re, "invalid token") {
		return true
	}
	_, err := s.client.Auth().Token().LookupSelfWithContext(ctx)
	var lre *api.ResponseError
	return errors.As(err, &lre) && lre.StatusCode == 403
}

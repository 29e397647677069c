package keystore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/vault/api"
)

// mountInfo is what the preflight said about a mount.
type mountInfo struct {
	kv      bool // a KV mount (type kv or generic); anything else is read verbatim
	version int  // KV version (1 or 2)
}

// readResult is one read of a secret.
type readResult struct {
	data  map[string]any
	where string // the API path read, for messages
	lease *Lease // nil: no lease (a static secret)
}

// readSecret reads the secret at path with s's token: a KV secret's
// current version (KV v2 at <mount>/data/<rest>), any other mount's path
// verbatim (aws/creds/<role>, aws/sts/<role>, database/creds/<role>),
// with the lease it carries.
func (v *Vault) readSecret(ctx context.Context, s *vaultSession, path string) (readResult, error) {
	mount, info, err := v.mount(ctx, s, path)
	if err != nil {
		return readResult{}, err
	}
	rest := strings.TrimSuffix(strings.TrimPrefix(path+"/", mount), "/")
	if rest == "" {
		return readResult{}, fmt.Errorf("%w: %s is a mount, not a secret", ErrNotFound, strings.TrimSuffix(mount, "/"))
	}
	apiPath := mount + rest
	if info.kv && info.version == 2 {
		apiPath = mount + "data/" + rest
	}
	sec, err := s.client.Logical().ReadWithContext(ctx, apiPath)
	if err != nil {
		return readResult{}, v.classify(ctx, "read of "+apiPath, err, s.token)
	}
	if sec == nil || sec.Data == nil {
		return readResult{}, fmt.Errorf("%w: no secret at %s", ErrNotFound, apiPath)
	}
	r := readResult{data: sec.Data, where: apiPath}
	if sec.LeaseID != "" {
		r.lease = &Lease{Backend: BackendVault, ID: sec.LeaseID, Renewable: sec.Renewable,
			TTL: time.Duration(sec.LeaseDuration) * time.Second}
	}
	if info.kv && info.version == 2 {
		d, _ := sec.Data["data"].(map[string]any)
		if d == nil {
			v.revokeQuietly(ctx, r.lease)
			return readResult{}, fmt.Errorf("%w: no current version of the secret at %s (deleted or destroyed)", ErrNotFound, apiPath)
		}
		r.data = d
	}
	return r, nil
}

// field returns r's field name as a string.
func (r readResult) field(name string) (string, error) {
	raw, ok := r.data[name]
	if !ok {
		return "", fmt.Errorf("%w: the secret at %s has no field %q", ErrNotFound, r.where, name)
	}
	val, ok := raw.(string)
	if !ok {
		return "", fmt.Errorf("%w: field %q of the secret at %s is not a string", ErrNotFound, name, r.where)
	}
	return val, nil
}

// mount returns the mount path (with a trailing "/") holding path and
// what it is, asking Vault the way the CLI does (the preflight).
func (v *Vault) mount(ctx context.Context, s *vaultSession, path string) (string, mountInfo, error) {
	v.mu.Lock()
	best := ""
	for m := range v.mounts {
		if strings.HasPrefix(path+"/", m) && len(m) > len(best) {
			best = m
		}
	}
	info := v.mounts[best]
	v.mu.Unlock()
	if best != "" {
		return best, info, nil
	}
	first, _, _ := strings.Cut(path, "/")
	sec, err := s.client.Logical().ReadWithContext(ctx, "sys/internal/ui/mounts/"+path)
	if err != nil {
		var re *api.ResponseError
		if errors.As(err, &re) && re.StatusCode == 403 && !mentions(re, "invalid token") {
			// Refused (the token may read the secret but not see its
			// mount): assume KV v2 at the first segment.
			return first + "/", mountInfo{kv: true, version: 2}, nil
		}
		return "", mountInfo{}, v.classify(ctx, "mount lookup (sys/internal/ui/mounts)", err, s.token)
	}
	if sec == nil {
		// 404: a Vault without the preflight endpoint: KV v1, as the CLI.
		return first + "/", mountInfo{kv: true, version: 1}, nil
	}
	m, _ := sec.Data["path"].(string)
	typ, _ := sec.Data["type"].(string)
	info = mountInfo{kv: typ == "kv" || typ == "generic" || typ == "", version: 1}
	if opts, ok := sec.Data["options"].(map[string]any); ok {
		if ver, _ := opts["version"].(string); ver == "2" {
			info.version = 2
		}
	}
	if m == "" || !strings.HasSuffix(m, "/") || !strings.HasPrefix(path+"/", m) {
		return first + "/", info, nil // unexpected answer: don't cache it
	}
	v.mu.Lock()
	v.mounts[m] = info
	v.mu.Unlock()
	return m, info, nil
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

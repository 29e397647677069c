package server

import (
	"context"
	"crypto/rand"
	"errors"

	"google.golang.org/protobuf/types/known/timestamppb"

	"coily.dev/coily/access"
	"coily.dev/coily/descriptor"
	"coily.dev/coily/policy"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	coilyv1grpc "coily.dev/coily/proto/coily/v1/coilyv1grpc"
	"coily.dev/coily/refusal"
	"coily.dev/coily/store"
)

// IssueKey issues a sandbox's first descriptor signing key. A sandbox that
// has one is refused: RotateKeys replaces it.
func (s *Server) IssueKey(ctx context.Context, req *coilyv1.IssueKeyRequest) (*coilyv1.IssueKeyResponse, error) {
	c, err := access.CallerFrom(ctx)
	if err != nil {
		return nil, err
	}
	name := req.GetSandbox()
	if !policy.SandboxNamePattern.MatchString(name) {
		return nil, s.refuseControl(ctx, c, "key.issue", refusal.New(refusal.BadRequest, "sandbox name must match %s", policy.SandboxNamePattern))
	}
	secret, err := newKey(name)
	if err != nil {
		return nil, s.refuseControl(ctx, c, "key.issue", refusal.Wrap(refusal.Internal, err, "no randomness for a key"))
	}
	key, err := s.cfg.Shared.IssueKey(name, secret, s.cfg.Now())
	if errors.Is(err, store.ErrKeyExists) {
		return nil, s.refuseControl(ctx, c, "key.issue", refusal.New(refusal.BadRequest, "sandbox %q already has a key; rotate it instead", name))
	}
	rec := access.CallerRecord(c, coilyv1grpc.CoilyService_IssueKey_FullMethodName, "key.issue", "")
	rec.Lists = map[string][]string{"sandboxes": {name}}
	if err := s.recordControl(ctx, rec, outcome(err), err); err != nil {
		return nil, err
	}
	return &coilyv1.IssueKeyResponse{Key: keyProto(key)}, nil
}

// RotateKeys replaces one sandbox's key, or every sandbox's.
func (s *Server) RotateKeys(ctx context.Context, req *coilyv1.RotateKeysRequest) (*coilyv1.RotateKeysResponse, error) {
	c, err := access.CallerFrom(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	if name := req.GetSandbox(); name != "" {
		if !policy.SandboxNamePattern.MatchString(name) {
			return nil, s.refuseControl(ctx, c, "key.rotate", refusal.New(refusal.BadRequest, "sandbox name must match %s", policy.SandboxNamePattern))
		}
		switch _, err := s.cfg.Shared.Key(name); {
		case errors.Is(err, store.ErrNotFound):
			return nil, s.refuseControl(ctx, c, "key.rotate", refusal.New(refusal.BadRequest, "sandbox %q has no key; bootstrap it first", name))
		case err != nil:
			return nil, s.refuseControl(ctx, c, "key.rotate", refusal.Wrap(stateCode(err), err, "signing keys unavailable"))
		}
		names = []string{name}
	} else if names, err = s.sandboxNames(); err != nil {
		return nil, s.refuseControl(ctx, c, "key.rotate", refusal.Wrap(stateCode(err), err, "signing keys unavailable"))
	}
	keys, err := s.replaceKeys(ctx, c, "key.rotate", names)
	if err != nil {
		return nil, err
	}
	resp := &coilyv1.RotateKeysResponse{Sandboxes: names}
	if req.GetSandbox() != "" {
		resp.Key = keyProto(keys[0])
	}
	return resp, nil
}

// replaceKeys stores fresh keys for the sandboxes and audits it.
func (s *Server) replaceKeys(ctx context.Context, c access.Caller, event string, names []string) ([]store.Key, error) {
	keys, err := s.cfg.Shared.ReplaceKeys(names, newKey, s.cfg.Now())
	rec := access.CallerRecord(c, "/"+coilyv1grpc.CoilyService_ServiceDesc.ServiceName+"/"+controlMethods[event], event, "")
	rec.Lists = map[string][]string{"sandboxes": names}
	if err := s.recordControl(ctx, rec, outcome(err), err); err != nil {
		return nil, err
	}
	return keys, nil
}

// rotateAllKeys replaces every key on Lockout: no descriptor signed
// before it verifies after.
func (s *Server) rotateAllKeys() error {
	names, err := s.sandboxNames()
	if err != nil || len(names) == 0 {
		return err
	}
	_, err = s.cfg.Shared.ReplaceKeys(names, newKey, s.cfg.Now())
	return err
}

func (s *Server) sandboxNames() ([]string, error) {
	keys, err := s.cfg.Shared.Keys()
	names := make([]string, 0, len(keys))
	for _, k := range keys {
		names = append(names, k.Sandbox)
	}
	return names, err
}

func newKey(string) ([]byte, error) {
	k := make([]byte, descriptor.KeySize)
	_, err := rand.Read(k)
	return k, err
}

func keyProto(k store.Key) *coilyv1.SandboxKey {
	return &coilyv1.SandboxKey{Sandbox: k.Sandbox, Secret: k.Secret, Generation: int32(k.Generation), Created: timestamppb.New(k.Created)}
}

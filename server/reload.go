package server

import (
	"context"

	"coily.dev/coily/policy"
	"coily.dev/coily/policyfile"
)

// ReloadPolicy reloads the policy from its file at path
// (policyfile.Reloader.Reload): a valid policy that differs is put in
// force for new requests once its reload is audited; an invalid file
// changes nothing, and the refusal is audited.
func (s *Server) ReloadPolicy(ctx context.Context, path string) error {
	return s.policyFile().Reload(ctx, path)
}

// WatchPolicy reloads the policy whenever its file changes, until ctx
// ends (policyfile.Reloader.Watch).
func (s *Server) WatchPolicy(ctx context.Context, path string) error {
	return s.policyFile().Watch(ctx, path)
}

func (s *Server) policyFile() *policyfile.Reloader {
	return policyfile.New(policyfile.Config{Current: s.Policy, Record: s.record, Apply: s.applyPolicy, Log: s.log})
}

// applyPolicy puts p in force for new requests.
func (s *Server) applyPolicy(p *policy.Policy) {
	s.policy.Store(p)
	s.metrics.Rules(p)
	s.configureNotifier(p)
	logAbsentBinaries(s, p)
}

// logAbsentBinaries warns about rules that cannot match on this host, and
// obligations whose meaning changed (policy.ReloadWarnings).
func logAbsentBinaries(s *Server, p *policy.Policy) {
	for _, w := range p.ReloadWarnings() {
		s.log.Warn("policy warning", "rule", w.Rule, "line", w.Line, "why", w.Msg)
	}
}

package policy

import "path/filepath"

// ruleCAFile reads `ca_file:`, the owner's PEM bundle that the command
// trusts instead of the system's; the bwrap sandbox binds it by
// descriptor (sandbox.CAPath).
func (b *builder) ruleCAFile(r *Rule, rf ruleFile, rn ruleNode) {
	if !rn.has("ca_file") {
		return
	}
	at := rn.at("ca_file")
	switch {
	case !filepath.IsAbs(rf.CAFile) || filepath.Clean(rf.CAFile) != rf.CAFile:
		b.failAt(at, "rule %q: ca_file must be a clean absolute path, got %q", r.Name, rf.CAFile)
	case r.Sandbox != SandboxBwrap:
		b.failAt(at, "rule %q: ca_file needs sandbox bwrap, got sandbox %q", r.Name, r.Sandbox)
	}
	r.CAFile = rf.CAFile
}

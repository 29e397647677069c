package server

import (
	"path/filepath"

	"coily.dev/coily/gitproxy"
)

// GitProxy returns the git proxy (package gitproxy) over the server's
// gate, stop controls, audit, approvals and keystore.
func (s *Server) GitProxy() (*gitproxy.Proxy, error) {
	var ks gitproxy.Keystore // nil, not a nil *keystore.Keystore, when there is none
	if s.cfg.Keystore != nil {
		ks = s.cfg.Keystore
	}
	return gitproxy.New(gitproxy.Config{Dir: filepath.Join(s.cfg.StateDir, "git"), Gate: s.gate, Stopped: s.stops.Stopped,
		Record: s.record, Approvals: s.approvals, Waiting: s.notifyApproval, Keystore: ks, Log: s.log})
}

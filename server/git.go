package server

import (
	"path/filepath"

	"coily.dev/coily/gitproxy"
)

// GitProxy returns the git proxy (package gitproxy) over the server's
// gate, stop controls, audit, approvals and keystore.
func (s *Server) GitProxy() (*gitproxy.Proxy, error) {
	return gitproxy.New(gitproxy.Config{Dir: filepath.Join(s.cfg.StateDir, "git"), Gate: s.gate, Stopped: s.stops.Stopped,
		Record: s.record, Approvals: s.approvals, Keystore: s.cfg.Keystore, Log: s.log})
}

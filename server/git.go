package server

import (
	"net/http"
	"path/filepath"

	"coily.dev/coily/access"
	"coily.dev/coily/gitproxy"
	"coily.dev/coily/httpserve"
)

// GitProxy returns the git proxy (package gitproxy) over the server's
// gate, stop controls, audit, approvals and keystore; its caches' budgets in bytes (0: default).
func (s *Server) GitProxy(cacheBytes, remoteCacheBytes int64) (*gitproxy.Proxy, error) {
	var ks gitproxy.Keystore // nil, not a nil *keystore.Keystore, when there is none
	if s.cfg.Keystore != nil {
		ks = s.cfg.Keystore
	}
	p, err := gitproxy.New(gitproxy.Config{Dir: filepath.Join(s.cfg.StateDir, "git"), Gate: s.gate, Stopped: s.stops.Stopped,
		Record: s.record, Approvals: s.approvals, Waiting: s.notifyApproval, Keystore: ks, Log: s.log, CacheBytes: cacheBytes, RemoteCacheBytes: remoteCacheBytes})
	s.relay.ServeGit(p) // the sandboxes' git exchanges run through it
	return p, err
}

// GitHTTPServer serves the git proxy h on the tailnet node: each peer's
// connections are capped as the console's are, a refusal audited as
// git:connection.
func (s *Server) GitHTTPServer(h http.Handler) *httpserve.Server {
	return httpserve.New(h, gitproxy.Limits, s.connCap(access.TransportTailnet, "git:connection"))
}

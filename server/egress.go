package server

import (
	"net"
	"os"
	"path/filepath"

	"coily.dev/coily/audit"
	"coily.dev/coily/egress"
	"coily.dev/coily/policy"
	"coily.dev/coily/refusal"
)

// egressRun is one exec's own egress proxy (DESIGN §7a): it listens on a
// unix socket in a private scratch directory, which the sandbox binds in
// for `coily __netbridge`; the sandbox has no other route out.
type egressRun struct {
	proxy  *egress.Proxy
	dir    string
	Socket string // in dir
}

// startEgress starts the proxy of a rule whose network is proxied, with
// the rule's effective allowlist (its hosts and presets) and CIDRs. Any
// failure refuses the exec: proxied never degrades to open.
func (s *Server) startEgress(x *execution) (*egressRun, error) {
	eg := x.rule.Egress
	if eg == nil {
		eg = &policy.Egress{} // proxied with no egress block: nothing is allowed
	}
	var entries []string
	for _, hp := range eg.Effective() {
		entries = append(entries, hp.String())
	}
	allow, err := egress.NewAllowlist(entries, eg.CIDRs)
	if err != nil {
		return nil, refusal.Wrap(refusal.SandboxUnavailable, err, "egress allowlist of rule %q", x.rule.Name)
	}
	mode := egress.Enforce
	if eg.Mode == policy.EgressObserve {
		mode = egress.Observe
	}
	p, err := egress.New(egress.Config{Rule: x.rule.Name, Allowlist: allow, Mode: mode, Now: s.cfg.Now, Logger: s.log})
	if err != nil {
		return nil, refusal.Wrap(refusal.SandboxUnavailable, err, "egress proxy of rule %q", x.rule.Name)
	}
	dir, err := os.MkdirTemp(s.cfg.ScratchDir, scratchPrefix)
	if err != nil {
		return nil, refusal.Wrap(refusal.Internal, err, "could not create the egress proxy's directory")
	}
	run := &egressRun{proxy: p, dir: dir, Socket: filepath.Join(dir, "egress.sock")}
	l, err := net.Listen("unix", run.Socket)
	if err != nil {
		os.RemoveAll(dir)
		return nil, refusal.Wrap(refusal.SandboxUnavailable, err, "egress proxy socket")
	}
	go func() { _ = p.Serve(l) }() // ends when the proxy closes
	return run, nil
}

// socket is the proxy's socket, "" without a proxy.
func (r *egressRun) socket() string {
	if r == nil {
		return ""
	}
	return r.Socket
}

// stop ends the proxy and every tunnel, removes its socket, and returns
// what it saw, for the exec's audit record.
func (r *egressRun) stop() []audit.EgressRow {
	if r == nil {
		return nil
	}
	_ = r.proxy.Close()
	os.RemoveAll(r.dir)
	var out []audit.EgressRow
	for _, row := range r.proxy.Rows() {
		out = append(out, audit.EgressRow{Host: row.Host, Port: row.Port, Decision: string(row.Decision), Reason: row.Reason,
			Conns: row.Conns, Failures: row.Failures, BytesUp: row.BytesUp, BytesDown: row.BytesDown,
			DurationMS: float64(row.Duration.Microseconds()) / 1000, First: row.First, Last: row.Last})
	}
	return out
}

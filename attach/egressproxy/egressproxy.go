// Package egressproxy is the attachment of a rule whose network is
// proxied: the exec's own egress proxy (package egress). It listens on a
// unix socket in a private scratch directory, which the sandbox binds in
// (by descriptor) for `coily __netbridge`; the sandbox has no other route
// out. A root server gives the socket and the known hosts file to the
// sandbox's user; the directory stays the server's alone. What the proxy
// saw goes into the exec's result record and its answer.
package egressproxy

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"coily.dev/coily/attach"
	"coily.dev/coily/audit"
	"coily.dev/coily/egress"
	"coily.dev/coily/policy"
	"coily.dev/coily/refusal"
	"coily.dev/coily/sandbox"
)

// Proxy is the egress proxy of one execution.
type Proxy struct {
	rule   string
	eg     *policy.Egress
	shared *egress.Budget
	now    func() time.Time
	// caFile is the rule's ca_file; validity how long its inspection CA
	// lives (the rule's timeout and a margin).
	caFile   string
	validity time.Duration

	secrets map[string]string // injected credentials, by the child's variable (Take)
	bundle  *os.File          // the CA bundle bound into the sandbox when inspecting
	proxy   *egress.Proxy
	dir     string
	closed  bool
}

// New is the proxy of rule r, under the server-wide connection budget
// shared; nil when r's network is not proxied.
func New(r *policy.Rule, shared *egress.Budget, now func() time.Time) *Proxy {
	if r.Network != policy.NetworkProxied {
		return nil
	}
	eg := r.Egress
	if eg == nil {
		eg = &policy.Egress{} // proxied with no egress block: nothing is allowed
	}
	return &Proxy{rule: r.Name, eg: eg, shared: shared, now: now, caFile: r.CAFile, validity: timeoutOf(r)}
}

var _ attach.Attachment = (*Proxy)(nil)

// Prepare starts the proxy with the rule's effective allowlist (its
// hosts and presets) and CIDRs, and binds its socket (its loopback
// address on macOS) and the rule's pinned ssh host keys. Any failure
// refuses the exec: proxied never degrades to open.
func (p *Proxy) Prepare(_ context.Context, run *attach.Run) error {
	allow, mode, err := p.eg.ProxyAllowlist()
	if err != nil {
		return refusal.Wrap(refusal.SandboxUnavailable, err, "egress of rule %q", p.rule)
	}
	var resolver egress.Resolver = net.DefaultResolver
	if len(p.eg.Hosts) > 0 {
		resolver = egress.Pinned{Hosts: p.eg.Hosts, Next: net.DefaultResolver}
	}
	insp, err := p.inspection(run)
	if err != nil {
		return err
	}
	px, err := egress.New(egress.Config{Rule: p.rule, Allowlist: allow, Mode: mode, Resolver: resolver, Shared: p.shared,
		MaxConns: p.eg.MaxConns, MaxBytes: p.eg.MaxBytes, Now: p.now, Logger: run.Log, Secrets: run.Secrets, Inspect: insp})
	if err != nil {
		return refusal.Wrap(refusal.SandboxUnavailable, err, "egress proxy of rule %q", p.rule)
	}
	dir, err := run.PrivateDir()
	if err != nil {
		return refusal.Wrap(refusal.Internal, err, "could not create the egress proxy's directory")
	}
	knownHosts, err := p.writeKnownHosts(run, dir)
	if err != nil {
		os.RemoveAll(dir)
		return refusal.Wrap(refusal.Internal, err, "could not write the rule's ssh known hosts")
	}
	l, bind, err := listen(run, dir)
	if err != nil {
		os.RemoveAll(dir)
		return refusal.Wrap(refusal.SandboxUnavailable, err, "egress proxy listener")
	}
	p.proxy, p.dir = px, dir
	go func() { _ = px.Serve(l) }() // ends when the proxy closes
	run.Bind(bind)
	if knownHosts != "" {
		run.Bind(sandbox.Bind{At: sandbox.KnownHostsPath, Path: knownHosts})
	}
	return nil
}

// writeKnownHosts writes the policy's ssh host keys, the only ones ssh
// inside trusts, into dir for the sandbox's ssh to read through its
// descriptor; "" when the rule pins none.
func (p *Proxy) writeKnownHosts(run *attach.Run, dir string) (string, error) {
	pins := p.eg.KnownHostsFile()
	if pins == nil {
		return "", nil
	}
	path := filepath.Join(dir, "known_hosts")
	err := os.WriteFile(path, pins, 0o600)
	if err == nil {
		err = run.Give(path)
	}
	return path, err
}

// listen listens where the sandbox reaches the proxy: a unix socket in
// dir, or, on macOS, whose sandbox-exec has no network namespace, a
// loopback port (its profile opens that port and nothing else).
func listen(run *attach.Run, dir string) (net.Listener, sandbox.Bind, error) {
	if runtime.GOOS == "darwin" {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, sandbox.Bind{}, err
		}
		return l, sandbox.Bind{At: sandbox.ProxyAddrBind, Path: l.Addr().String()}, nil
	}
	sock := filepath.Join(dir, "proxy.sock")
	l, err := attach.ListenUnix(sock)
	if err != nil {
		return nil, sandbox.Bind{}, err
	}
	// Connecting takes write access to the socket: the sandbox's user gets
	// it, in a directory only the server can enter.
	if err := run.Give(sock); err != nil {
		l.Close()
		return nil, sandbox.Bind{}, err
	}
	return l, sandbox.Bind{At: sandbox.ProxySocketPath, Path: sock}, nil
}

// Close ends the proxy and every tunnel and removes its directory; what
// it saw goes into the result record and the answer (a refusal's record,
// of a command that never ran, says nothing of it).
func (p *Proxy) Close(_ context.Context, end *attach.End) {
	if p.closed {
		return
	}
	p.closed = true
	p.closeBundle()
	var rows []egress.Row
	var requests []egress.RequestRow
	dropped := 0
	if p.proxy != nil {
		_ = p.proxy.Close()
		os.RemoveAll(p.dir)
		rows = p.proxy.Rows()
		requests, dropped = p.proxy.Requests()
	}
	if !end.Result {
		return
	}
	if end.Record != nil {
		end.Record.Egress = audit.EgressRows(rows)
		end.Record.EgressRequests = audit.EgressRequests(requests)
		if dropped > 0 {
			end.Record.SetDetail("egress_requests_dropped", strconv.Itoa(dropped))
		}
		for _, in := range p.eg.Inject {
			end.Record.UseCredential("egress inject " + in.Env + " from " + in.Ref.String() + " to " + in.HostPort() + in.Path)
		}
	}
	if end.Exit != nil {
		end.Exit.EgressDenied = deniedSentences(rows)
	}
}

// Describe adds nothing: the rows go into the result record (Close).
func (p *Proxy) Describe(*audit.Record) {}

// maxDeniedSentences bounds the refusals an exec's answer repeats.
const maxDeniedSentences = 16

// deniedSentences are the proxy's refusals, one per denied row, for the
// exec's answer: what the command's tool may have hidden behind "could
// not connect".
func deniedSentences(rows []egress.Row) []string {
	var out []string
	for _, row := range rows {
		if row.Decision == egress.Deny && row.Message.String() != "" && len(out) < maxDeniedSentences {
			out = append(out, strings.TrimPrefix(row.Message.String(), "coily: "))
		}
	}
	return out
}

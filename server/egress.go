package server

import (
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"coily.dev/coily/egress"
	"coily.dev/coily/policy"
	"coily.dev/coily/refusal"
)

// egressRun is one exec's own egress proxy (DESIGN §7a): it listens on a
// unix socket in a private scratch directory, which the sandbox binds in
// (by descriptor) for `coily __netbridge`; the sandbox has no other route
// out. A root server gives the socket and the known hosts file to the
// sandbox's user; the directory stays the server's alone.
type egressRun struct {
	proxy  *egress.Proxy
	dir    string
	Socket string // in dir (Linux: bound into the sandbox)
	Addr   string // 127.0.0.1:PORT (macOS: the one port its profile opens)
	// KnownHosts is the file of the rule's ssh_known_hosts, in dir; "" without.
	KnownHosts string

	once sync.Once
	rows []egress.Row
}

// startEgress starts the proxy of a rule whose network is proxied, with
// the rule's effective allowlist (its hosts and presets) and CIDRs. Any
// failure refuses the exec: proxied never degrades to open.
func (s *Server) startEgress(x *execution) (*egressRun, error) {
	eg := x.rule.Egress
	if eg == nil {
		eg = &policy.Egress{} // proxied with no egress block: nothing is allowed
	}
	allow, mode, err := eg.ProxyAllowlist()
	if err != nil {
		return nil, refusal.Wrap(refusal.SandboxUnavailable, err, "egress of rule %q", x.rule.Name)
	}
	var resolver egress.Resolver = net.DefaultResolver
	if len(eg.Hosts) > 0 {
		resolver = egress.Pinned{Hosts: eg.Hosts, Next: net.DefaultResolver}
	}
	p, err := egress.New(egress.Config{Rule: x.rule.Name, Allowlist: allow, Mode: mode, Resolver: resolver, Shared: s.egress,
		MaxConns: eg.MaxConns, MaxBytes: eg.MaxBytes, Now: s.cfg.Now, Logger: s.log, Secrets: x.scrub})
	if err != nil {
		return nil, refusal.Wrap(refusal.SandboxUnavailable, err, "egress proxy of rule %q", x.rule.Name)
	}
	dir, err := s.privateDir()
	if err != nil {
		return nil, refusal.Wrap(refusal.Internal, err, "could not create the egress proxy's directory")
	}
	run := &egressRun{proxy: p, dir: dir}
	if pins := eg.KnownHostsFile(); pins != nil {
		// The policy's ssh host keys, the only ones ssh inside trusts.
		run.KnownHosts = filepath.Join(dir, "known_hosts")
		err := os.WriteFile(run.KnownHosts, pins, 0o600)
		if err == nil {
			err = s.giveToSandbox(x, run.KnownHosts) // read through its descriptor by the sandbox's ssh
		}
		if err != nil {
			os.RemoveAll(dir)
			return nil, refusal.Wrap(refusal.Internal, err, "could not write the rule's ssh known hosts")
		}
	}
	var l net.Listener
	if runtime.GOOS == "darwin" {
		// sandbox-exec has no network namespace: the profile opens the
		// proxy's loopback port and nothing else.
		l, err = net.Listen("tcp", "127.0.0.1:0")
		if err == nil {
			run.Addr = l.Addr().String()
		}
	} else {
		run.Socket = filepath.Join(dir, "proxy.sock")
		l, err = listenUnix(run.Socket)
		if err == nil {
			// Connecting takes write access to the socket: the sandbox's
			// user gets it, in a directory only the server can enter.
			if err = s.giveToSandbox(x, run.Socket); err != nil {
				l.Close()
			}
		}
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, refusal.Wrap(refusal.SandboxUnavailable, err, "egress proxy listener")
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

// knownHosts is the rule's pinned ssh host keys file, "" without.
func (r *egressRun) knownHosts() string {
	if r == nil {
		return ""
	}
	return r.KnownHosts
}

// addr is the proxy's loopback address, "" without a TCP listener.
func (r *egressRun) addr() string {
	if r == nil {
		return ""
	}
	return r.Addr
}

// stop ends the proxy and every tunnel, removes its socket, and returns
// what it saw, for the exec's answer and audit record.
func (r *egressRun) stop() []egress.Row {
	if r == nil {
		return nil
	}
	r.once.Do(func() {
		_ = r.proxy.Close()
		os.RemoveAll(r.dir)
		r.rows = r.proxy.Rows()
	})
	return r.rows
}

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

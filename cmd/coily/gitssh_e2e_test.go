//go:build linux

package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"coily.dev/coily/egress"
	"coily.dev/coily/internal/standin"
	"coily.dev/coily/internal/testserver"
	"coily.dev/coily/policy"
)

// gitHost is the name the sandbox uses for the ssh server: the test's
// egress proxy resolves it to 127.0.0.1 (a name, so that the allowlist's
// port applies: an IP literal is allowed by CIDR alone, on any port).
const gitHost = "git.test"

// git over ssh from a proxied sandbox: ssh goes through the egress proxy
// (`coily __egress-connect` as its ProxyCommand) and trusts only the host
// keys pinned in --known-hosts. A real sshd (run as the test's user: as
// root in CI) serves a bare repository; the sandbox clones it, commits
// and pushes. A wrong pinned key fails the clone (a man in the middle
// would be refused), and so does a proxy whose allowlist lacks the port,
// with the proxy's message.
func TestGitOverSSHThroughEgress(t *testing.T) {
	requireBwrap(t)
	// sshd runs git through the login user's shell, and only root's sshd
	// may log in as another user: the test logs in as itself.
	me := standin.NeedSSH(t)
	srv := shortDir(t)
	ws := shortDir(t)
	// This test is of the transport (the tunnel and the pins), so the
	// client key is the workspace's own here; a key held by coily, which
	// never enters the sandbox, is TestCLIExecGitOverSSH's.
	clientKey := filepath.Join(ws, "id_ed25519")
	standin.SSHKeygen(t, clientKey)
	standin.SSHKeygen(t, filepath.Join(srv, "host_key"))
	standin.SSHKeygen(t, filepath.Join(srv, "other_key"))
	if err := os.Rename(clientKey+".pub", filepath.Join(srv, "authorized_keys")); err != nil {
		t.Fatal(err)
	}
	bare := seedBareRepo(t, srv)
	port := standin.SSHD(t, srv)
	url := fmt.Sprintf("ssh://%s@%s:%d%s", me, gitHost, port, bare)
	script := `set -e
GIT_SSH_COMMAND="$GIT_SSH_COMMAND -i $PWD/id_ed25519"; export GIT_SSH_COMMAND
git clone -q ` + shellQuote(url) + ` clone
cd clone
echo pushed > pushed.txt
git add pushed.txt
git -c user.name=sandbox -c user.email=sandbox@example.com commit -qm 'pushed from the sandbox'
git push -q origin main`
	pinned := knownHostsFile(t, srv, "host_key.pub", port)
	testserver.SandboxWorkspace(t, ws) // the client key too: ssh in the sandbox wants it its own
	run := func(proxySock, knownHosts string) cliRun {
		os.RemoveAll(filepath.Join(ws, "clone"))
		return runCoily(t, nil, "sandbox", "exec", "--network", "proxied", "--proxy-socket", proxySock,
			"--known-hosts", knownHosts, "--workspace", ws, "--", "/bin/sh", "-c", script)
	}

	proxy, sock := startGitEgress(t, fmt.Sprintf("%s:%d", gitHost, port))
	if r := run(sock, pinned); r.code != 0 {
		t.Fatalf("clone and push through the proxy: %+v", r)
	}
	if got := gitOut(t, "--git-dir", bare, "log", "-1", "--format=%s", "main"); got != "pushed from the sandbox" {
		t.Fatalf("the push did not land: last commit %q", got)
	}
	var rows []egress.Row
	for _, row := range proxy.Rows() {
		if row.Host.String() == gitHost && row.Port == port && row.Decision == egress.Allow {
			rows = append(rows, row)
		}
	}
	if len(rows) != 1 || rows[0].Conns != 2 || rows[0].BytesDown == 0 {
		t.Errorf("proxy rows %+v, want one allow row for %s:%d with 2 connections (clone, push)", proxy.Rows(), gitHost, port)
	}

	// A pinned key that is not the server's: a man in the middle.
	before := gitOut(t, "--git-dir", bare, "rev-parse", "main")
	wrong := knownHostsFile(t, srv, "other_key.pub", port)
	if r := run(sock, wrong); r.code == 0 || !strings.Contains(r.stderr, "Host key verification failed") {
		t.Errorf("wrong pinned key: want a host key verification error, got %+v", r)
	}

	// The proxy allows the host on another port only.
	_, refusing := startGitEgress(t, fmt.Sprintf("%s:%d", gitHost, port^1))
	want := fmt.Sprintf("coily: host %s:%d is not in the egress allowlist of rule \"git-ssh\"", gitHost, port)
	if r := run(refusing, pinned); r.code == 0 || !strings.Contains(r.stderr, want) {
		t.Errorf("port not allowed: want %q on stderr, got %+v", want, r)
	}
	if after := gitOut(t, "--git-dir", bare, "rev-parse", "main"); after != before {
		t.Errorf("a refused run changed the repository: %s → %s", before, after)
	}

	// An allow_cidrs entry with a port opens that port of the address
	// only: ssh to sshd's port by address is refused when the entry names
	// another.
	literal := fmt.Sprintf("ssh://%s@127.0.0.1:%d%s", me, port, bare)
	lsRemote := func(cidr string) cliRun {
		_, sock := startGitEgress(t, fmt.Sprintf("%s:%d", gitHost, port^1), cidr)
		return runCoily(t, nil, "sandbox", "exec", "--network", "proxied", "--proxy-socket", sock,
			"--known-hosts", pinned, "--workspace", ws, "--", "/bin/sh", "-c",
			`GIT_SSH_COMMAND="$GIT_SSH_COMMAND -i $PWD/id_ed25519" git ls-remote `+shellQuote(literal))
	}
	want = fmt.Sprintf("coily: 127.0.0.1:%d is a loopback address; refused", port)
	if r := lsRemote(fmt.Sprintf("127.0.0.1/32:%d", port^1)); r.code == 0 || !strings.Contains(r.stderr, want) {
		t.Errorf("git ls-remote by address on a port allow_cidrs does not open: want %q on stderr, got %+v", want, r)
	}
}

// seedBareRepo makes dir/repo.git holding one commit on main.
func seedBareRepo(t *testing.T, dir string) string {
	t.Helper()
	bare, seed := filepath.Join(dir, "repo.git"), filepath.Join(dir, "seed")
	gitOut(t, "init", "-q", "--bare", "-b", "main", bare)
	gitOut(t, "init", "-q", "-b", "main", seed)
	if err := os.WriteFile(filepath.Join(seed, "README"), []byte("seed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitOut(t, "-C", seed, "add", "README")
	gitOut(t, "-C", seed, "commit", "-qm", "seed")
	gitOut(t, "-C", seed, "push", "-q", bare, "main")
	return bare
}

// knownHostsFile pins the public key in dir/pub for [gitHost]:port, read
// through the policy's parser as a rule's ssh_known_hosts would be.
func knownHostsFile(t *testing.T, dir, pub string, port int) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, pub))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(data))
	k, err := policy.ParseKnownHost(fmt.Sprintf("[%s]:%d %s %s", gitHost, port, f[0], f[1]))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, pub+".known_hosts")
	if err := os.WriteFile(path, (&policy.Egress{SSHKnownHosts: []policy.KnownHost{k}}).KnownHostsFile(), 0o644); err != nil {
		t.Fatal(err)
	}
	testserver.SandboxWorkspace(t, path) // `sandbox exec --known-hosts`: bound by path for a root caller's sandbox user
	return path
}

// gitResolver resolves gitHost to 127.0.0.1 and nothing else.
type gitResolver struct{}

func (gitResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if host == gitHost {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// startGitEgress serves an egress proxy for rule "git-ssh" allowing entry
// (and the allow_cidrs entry cidr, by default 127.0.0.1/32, where gitHost
// resolves) on a unix socket until the test ends.
func startGitEgress(t *testing.T, entry string, cidr ...string) (*egress.Proxy, string) {
	t.Helper()
	c, err := egress.ParseCIDR(append(cidr, "127.0.0.1/32")[0])
	if err != nil {
		t.Fatal(err)
	}
	al, err := egress.NewAllowlist([]string{entry}, []egress.CIDR{c})
	if err != nil {
		t.Fatal(err)
	}
	p, err := egress.New(egress.Config{Rule: "git-ssh", Allowlist: al, Resolver: gitResolver{}})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(shortDir(t), "egress.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	testserver.SandboxWorkspace(t, sock) // `sandbox exec --proxy-socket`: the sandbox user connects to it
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = p.Serve(l) }()
	t.Cleanup(func() { p.Close(); wg.Wait() })
	return p, sock
}

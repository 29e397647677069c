//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"coily.dev/coily/egress"
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
	requireSSHTools(t)
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	// sshd runs git through the login user's shell, and only root's sshd
	// may log in as another user: the test logs in as itself.
	requireComponent(t, os.Geteuid() == 0 || hasLoginShell(me.Username),
		"root, or a login shell for "+me.Username+" (sshd runs git-upload-pack through it)")
	srv := shortDir(t)
	ws := shortDir(t)
	// The client key lives in the workspace for this test; keys held by
	// coily and offered through an ssh agent are a later issue.
	clientKey := filepath.Join(ws, "id_ed25519")
	sshKeygen(t, clientKey)
	sshKeygen(t, filepath.Join(srv, "host_key"))
	sshKeygen(t, filepath.Join(srv, "other_key"))
	if err := os.Rename(clientKey+".pub", filepath.Join(srv, "authorized_keys")); err != nil {
		t.Fatal(err)
	}
	bare := seedBareRepo(t, srv)
	port := startSSHD(t, srv)
	url := fmt.Sprintf("ssh://%s@%s:%d%s", me.Username, gitHost, port, bare)
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
		if row.Host == gitHost && row.Port == port && row.Decision == egress.Allow {
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
}

func requireSSHTools(t *testing.T) {
	t.Helper()
	ok := true
	for _, tool := range []string{"/usr/sbin/sshd", "ssh", "ssh-keygen", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			ok = false
		}
	}
	requireComponent(t, ok, "openssh-server (sshd), openssh-client (ssh, ssh-keygen) and git")
}

// hasLoginShell reports whether name's login shell (from /etc/passwd)
// runs commands.
func hasLoginShell(name string) bool {
	data, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Split(line, ":")
		if len(f) == 7 && f[0] == name {
			base := filepath.Base(f[6])
			return f[6] != "" && base != "nologin" && base != "false"
		}
	}
	return false
}

func sshKeygen(t *testing.T, path string) {
	t.Helper()
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", path).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v: %s", err, out)
	}
}

// gitOut runs git on the host with no user or system configuration.
func gitOut(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=seed", "GIT_AUTHOR_EMAIL=seed@example.com", "GIT_COMMITTER_NAME=seed", "GIT_COMMITTER_EMAIL=seed@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
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

// startSSHD runs sshd on 127.0.0.1 with dir's host key and authorized
// keys, in the foreground, until the test ends; it returns the port.
func startSSHD(t *testing.T, dir string) int {
	t.Helper()
	if os.Geteuid() == 0 {
		// root's sshd checks its privilege separation directory.
		if _, err := os.Stat("/run/sshd"); os.IsNotExist(err) {
			if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Remove("/run/sshd") })
		}
	}
	for attempt := 0; ; attempt++ {
		port := freePort(t)
		if sshdUp(t, dir, port) {
			return port
		}
		if attempt == 2 {
			t.Fatal("sshd did not start")
		}
	}
}

// sshdUp starts sshd on port and waits for its banner; false when it
// exited first (the port was taken meanwhile).
func sshdUp(t *testing.T, dir string, port int) bool {
	t.Helper()
	conf := filepath.Join(dir, "sshd_config")
	config := fmt.Sprintf(`ListenAddress 127.0.0.1
Port %d
HostKey %s
PidFile %s
AuthorizedKeysFile %s
StrictModes no
AuthenticationMethods publickey
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PermitRootLogin prohibit-password
LogLevel DEBUG1
`, port, filepath.Join(dir, "host_key"), filepath.Join(dir, "sshd.pid"), filepath.Join(dir, "authorized_keys"))
	if err := os.WriteFile(conf, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	log := new(syncBuffer)
	cmd := exec.Command("/usr/sbin/sshd", "-D", "-e", "-f", conf)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop := func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		waitSessions(t, log.String())
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if sshBanner(port) {
			t.Cleanup(stop)
			return true
		}
		select {
		case <-exited:
			t.Logf("sshd on port %d exited: %s", port, log)
			return false
		default:
		}
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("sshd did not answer on port %d: %s", port, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sshBanner reports whether an ssh server answers on 127.0.0.1:port.
func sshBanner(port int) bool {
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "SSH-2.0-")
}

// waitSessions waits until no process is left alive in the sessions of
// the connections sshd logged ("Forked child N": each one calls setsid,
// and its privilege-separated children stay in its session, even when
// orphaned); any left at the deadline is killed, and the test fails.
func waitSessions(t *testing.T, log string) {
	t.Helper()
	sids := map[string]bool{}
	for _, line := range strings.Split(log, "\n") {
		if _, pid, ok := strings.Cut(line, "Forked child "); ok {
			sids[strings.TrimSuffix(strings.TrimSpace(pid), ".")] = true
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := sessionProcs(sids)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, pid := range left {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			t.Errorf("sshd's connection processes %v outlived their clients", left)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sessionProcs lists the live (not zombie) processes whose session is
// one of sids.
func sessionProcs(sids map[string]bool) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp session …: comm may hold spaces.
		s := string(stat)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 3 && f[0] != "Z" && sids[f[3]] {
			out = append(out, pid)
		}
	}
	return out
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
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
// (and 127.0.0.1/32, where gitHost resolves) on a unix socket until the
// test ends.
func startGitEgress(t *testing.T, entry string) (*egress.Proxy, string) {
	t.Helper()
	al, err := egress.NewAllowlist([]string{entry}, []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")})
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

// The same through `coily serve`: the rule's ssh_known_hosts pins reach
// ssh in the sandbox, the push lands, and the record has the row.
func TestCLIExecGitOverSSH(t *testing.T) {
	requireBwrap(t)
	requireSSHTools(t)
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	requireComponent(t, os.Geteuid() == 0 || hasLoginShell(me.Username),
		"root, or a login shell for "+me.Username+" (sshd runs git-upload-pack through it)")
	srv := shortDir(t)
	dir := shortDir(t)
	ws := filepath.Join(shortDir(t), "ws") // not in the state directory, private to the server
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	clientKey := filepath.Join(ws, "id_ed25519")
	sshKeygen(t, clientKey)
	sshKeygen(t, filepath.Join(srv, "host_key"))
	if err := os.Rename(clientKey+".pub", filepath.Join(srv, "authorized_keys")); err != nil {
		t.Fatal(err)
	}
	bare := seedBareRepo(t, srv)
	port := startSSHD(t, srv)
	pub, err := os.ReadFile(filepath.Join(srv, "host_key.pub"))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(pub))
	pin := fmt.Sprintf("[%s]:%d %s %s", gitHost, port, f[0], f[1])
	testserver.SandboxWorkspace(t, ws)
	p := startServe(t, dir, writePolicy(t, dir, fmt.Sprintf(`version: 1
workspaces: {repo: %s}
roles: {operator: {permissions: [exec], commands: [git-ssh]}}
commands:
  - name: git-ssh
    binary: /bin/sh
    args: ["**"]
    flags: any
    workspace: repo
    network: proxied
    egress:
      allow: ["%s:%d"]
      allow_cidrs: [127.0.0.0/8]
      hosts: {%s: [127.0.0.1]}
      ssh_known_hosts: [%q]
`, ws, gitHost, port, gitHost, pin)))
	url := fmt.Sprintf("ssh://%s@%s:%d%s", me.Username, gitHost, port, bare)
	script := `set -e
GIT_SSH_COMMAND="$GIT_SSH_COMMAND -i $PWD/id_ed25519"; export GIT_SSH_COMMAND
git clone -q ` + shellQuote(url) + ` clone
cd clone
echo pushed > pushed.txt
git add pushed.txt
git -c user.name=sandbox -c user.email=sandbox@example.com commit -qm 'pushed through coily'
git push -q origin main`
	if r := p.run(t, "exec", "--", "/bin/sh", "-c", script); r.code != 0 {
		t.Fatalf("clone and push through coily: %+v\n%s", r, p.log)
	}
	if got := gitOut(t, "--git-dir", bare, "log", "-1", "--format=%s", "main"); got != "pushed through coily" {
		t.Fatalf("the push did not land: last commit %q", got)
	}
	recs := egressRecords(t, dir)
	if len(recs) != 1 {
		t.Fatalf("%d exec.result records", len(recs))
	}
	if row, ok := findRow(recs[0].Egress, gitHost, port, "allow"); !ok || row.Conns != 2 {
		t.Errorf("rows %+v, want one allow row with 2 connections (clone, push)", recs[0].Egress)
	}
}

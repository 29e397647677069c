//go:build linux

package fleet_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"coily.dev/coily/audit"
	"coily.dev/coily/client"
	"coily.dev/coily/fleet"
	"coily.dev/coily/internal/etcdtest"
	"coily.dev/coily/internal/netnstest"
	"coily.dev/coily/internal/poll"
	"coily.dev/coily/internal/testlog"
	"coily.dev/coily/internal/testserver"
	"coily.dev/coily/refusal"
	"coily.dev/coily/server"
	"coily.dev/coily/store"
	"coily.dev/coily/store/etcdstore"
)

// The network between the cut host and the cluster: a veth pair between
// the host's namespace and the forwarder's, both the test's own.
const (
	hostEnd, hostAddr = "coily0", "10.99.0.2/30"
	fwdEnd            = "etcd0" // its address: etcdtest.ForwardAddr/30
	// opsAddr is the cut host's /readyz, on its namespace's loopback.
	opsAddr = "127.0.0.1:9464"
)

// cutHost is `coily serve` in a process of its own, inside a network
// namespace holding only its loopback and one end of a veth pair, its
// shared state in etcd reached over that pair: the other end is in a
// second namespace, where the test's forwarder in front of every member
// listens (on etcdtest.ForwardAddr); the forwarder dials the members on
// the test's loopback. Nothing listens on an address of the test's own
// namespace but the members. Setting the forwarder's end down is the cut:
// the kernel drops what the host sends (no reset); up again, the link
// carries it on.
type cutHost struct {
	ns, fwd *netnstest.NS
	state   string // the server's state directory
	client  *client.Client
	cmd     *exec.Cmd
	log     *testlog.Buffer
}

// requireNetns skips the test where network namespaces cannot be made
// (not root), except under CI=true: there the suite runs as root.
func requireNetns(t *testing.T) {
	t.Helper()
	if err := netnstest.Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v: under CI=true this test runs in the suite's root phase", err)
		}
		t.Skipf("%v: run it as root (docs/reliability.md)", err)
	}
}

// startCutHost starts the cut host's server on trust point cname, and
// waits until it admits.
func startCutHost(t *testing.T, cname string) *cutHost {
	t.Helper()
	bin := coilyBinary(t)
	h := &cutHost{ns: netnstest.New(t), fwd: netnstest.New(t), log: new(testlog.Buffer)}
	fwdIP := etcdtest.ForwardAddr.String()
	netnstest.Veth(t, h.ns, hostEnd, hostAddr, h.fwd, fwdEnd, fwdIP+"/30")
	link, err := cluster.LinkOn(1, func() (net.Listener, error) { return h.fwd.Listen("tcp", net.JoinHostPort(fwdIP, "0")) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(link.Close)
	var members []string
	for _, e := range link.Endpoints() {
		members = append(members, strings.TrimPrefix(e, "https://"))
	}

	dir, err := os.MkdirTemp("", "coily-cut-") // short: the socket's path is bounded
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ca, cert, key, err := cluster.ClientFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	seal, pol := filepath.Join(dir, "seal.key"), filepath.Join(dir, "policy.yaml")
	h.state = filepath.Join(dir, "state")
	for _, err := range []error{os.WriteFile(seal, sealKey, 0o600), os.WriteFile(pol, []byte(testserver.LocalPolicy), 0o600), os.Mkdir(h.state, 0o700)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	h.cmd = exec.Command(bin, "serve", "--state-dir", h.state, "--policy", pol, "--allow-root",
		"--state", "etcd://"+strings.Join(members, ",")+"/"+cname, "--etcd-ca", ca, "--etcd-cert", cert, "--etcd-key", key,
		"--state-seal-key", seal, "--host-name", "cut-host", "--sandbox-uids", "none", "--kill-grace", killGrace.String(),
		"--metrics-listen", opsAddr)
	h.cmd.Env = withoutCoilyEnv(os.Environ())
	h.cmd.Stdout, h.cmd.Stderr = h.log, h.log
	// Killed with the test's process should it die first: the namespace
	// goes with it.
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := h.ns.Start(h.cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.stop(t) })
	if h.client, err = client.DialLocal(filepath.Join(h.state, "coily.sock")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.client.Close() })
	poll.Until(t, time.Minute, "the server in the namespace admits", func() bool { return execOn(h.client, "/bin/true") == nil })
	return h
}

// withoutCoilyEnv is env without its COILY_ variables: the server's
// configuration is its flags alone.
func withoutCoilyEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "COILY_") {
			out = append(out, kv)
		}
	}
	return out
}

// stop stops the server (SIGTERM, then SIGKILL) and shows its log if the
// test failed.
func (h *cutHost) stop(t *testing.T) {
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- h.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = h.cmd.Process.Kill()
		<-done
		t.Error("the server in the namespace did not stop on SIGTERM")
	}
	if t.Failed() {
		t.Logf("the server in the namespace logged:\n%s", h.log)
	}
}

// ready asks the server's /readyz (from inside its namespace): its
// status and body.
func (h *cutHost) ready() (int, string) {
	tr := &http.Transport{DialContext: h.ns.DialContext, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+opsAddr+"/readyz", nil)
	if err != nil {
		return 0, err.Error()
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	return resp.StatusCode, string(body)
}

// link sets the forwarder's end of the pair up or down.
func (h *cutHost) link(t *testing.T, state string) {
	t.Helper()
	h.fwd.IP(t, "link", "set", fwdEnd, state)
}

// waitAudit waits for a record of the server's own log that match
// accepts.
func (h *cutHost) waitAudit(t *testing.T, what string, match func(audit.Record) bool) audit.Record {
	t.Helper()
	var found audit.Record
	poll.Until(t, within, what, func() bool {
		recs, _ := audit.Tail(filepath.Join(h.state, "audit"), 1000)
		for _, r := range recs {
			if match(r) {
				found = r
				return true
			}
		}
		return false
	})
	return found
}

// inProcessHost is a coily server in the test's process on the trust
// point under prefix, reaching the members directly.
func inProcessHost(t *testing.T, prefix string) *node {
	t.Helper()
	s, err := etcdstore.Open(context.Background(), etcdstore.Config{Endpoints: cluster.Endpoints(), TLS: cluster.ClientTLS(),
		Prefix: prefix, SealKey: sealKey, CallTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	in := testserver.Start(t, testserver.Options{KillGrace: killGrace, SandboxUIDs: server.UIDRange{Off: true},
		Shared: func(*store.DB) store.Shared { return s }, Fleet: fleet.New(fleet.Config{Store: s, Logger: quiet})})
	n := &node{Instance: in, store: s, prefix: prefix}
	poll.Until(t, within, "the in-process server admits", func() bool { return n.exec("/bin/true") == nil })
	return n
}

// A host cut from etcd by the kernel (issue 26's acceptance): `coily
// serve` in a network namespace of its own, reaching the cluster over a
// veth pair whose far end is set down. While cut it refuses a new Exec
// state-unavailable and its /readyz says not ready; a lockout taken
// meanwhile on an in-process host cannot reach it, but the cut outlasts
// the fence (11 s), so the command it was running is killed, answered
// state-unavailable, while it is still cut. With the link up again the
// first answer it gives other than state-unavailable is lockout-active (it
// re-read the stops before admitting anything), and it audits
// lockout.remote; an unlock on the in-process host lifts it there.
func TestHostCutByNetns(t *testing.T) {
	requireNetns(t)
	b := make([]byte, 6)
	rand.Read(b)
	cname := "netns-" + hex.EncodeToString(b)
	a := inProcessHost(t, "/coily/"+cname+"/")
	h := startCutHost(t, cname)
	poll.Until(t, within, "the server in the namespace says it is ready", func() bool { code, _ := h.ready(); return code == http.StatusOK })

	running := sleepOn(t, h.client, "echo $$; exec sleep 60")
	cut := time.Now()
	h.link(t, "down")
	var took time.Duration // the Exec that was refused: how long it waited
	poll.Until(t, within, "the cut host refuses", func() bool {
		sent := time.Now()
		code := codeOf(execOn(h.client, "/bin/true"))
		took = time.Since(sent)
		return code == refusal.StateUnavailable
	})
	refused := time.Since(cut)
	poll.Until(t, within, "the cut host says it is not ready", func() bool {
		code, body := h.ready()
		return code == http.StatusServiceUnavailable && strings.Contains(body, "shared state")
	})
	reason := "while " + cname + " is cut"
	if err := a.lockout(t, reason); err != nil {
		t.Fatal(err)
	}
	if code := codeOf(a.exec("/bin/true")); code != refusal.LockoutActive {
		t.Fatalf("the in-process host under its own lockout answered %q", code)
	}

	poll.Until(t, 45*time.Second, "the fence kills the cut host's command", func() bool { return !alive(running.pid) })
	fenced := time.Since(cut)
	running.wantStopped(t, refusal.StateUnavailable)
	if code := codeOf(execOn(h.client, "/bin/true")); code != refusal.StateUnavailable {
		t.Fatalf("still cut after the fence, the host answered %q, want state-unavailable", code)
	}

	healed := time.Now()
	h.link(t, "up")
	poll.Until(t, time.Minute, "the host back decides again", func() bool {
		switch code := codeOf(execOn(h.client, "/bin/true")); code {
		case refusal.StateUnavailable:
			return false
		case refusal.LockoutActive:
			return true
		default:
			t.Fatalf("the host back answered %q before the lockout taken while it was cut", code)
			return true
		}
	})
	back := time.Since(healed)
	rec := h.waitAudit(t, "the host back audits lockout.remote", func(r audit.Record) bool {
		return r.Event == audit.EventLockoutRemote && r.Reason == reason
	})
	if rec.Details["etcd_rev"] == "" {
		t.Fatalf("lockout.remote without its revision: %+v", rec)
	}

	a.unlock(t)
	poll.Until(t, within, "the unlock reaches the host in the namespace", func() bool { return execOn(h.client, "/bin/true") == nil })
	poll.Until(t, within, "the host in the namespace says it is ready again", func() bool { code, _ := h.ready(); return code == http.StatusOK })
	t.Logf("from the cut: refusing state-unavailable after %v (that Exec answered in %v), its command dead (fence) after %v; from the link up: refusing lockout-active after %v",
		refused.Round(time.Millisecond), took.Round(time.Millisecond), fenced.Round(time.Millisecond), back.Round(time.Millisecond))
}

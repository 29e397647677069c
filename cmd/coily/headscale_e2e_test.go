package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"coily.dev/coily/client"
	"coily.dev/coily/descriptor"
	"coily.dev/coily/internal/devnet"
	"coily.dev/coily/internal/headscaletest"
	"coily.dev/coily/internal/testlog"
	coilyv1 "coily.dev/coily/proto/coily/v1"
)

// Tests over a real headscale (internal/headscaletest): a real `coily
// serve --tailnet` joined to it with a tagged pre-auth key, real `coily
// --tsnet` clients whose nodes persist (client/tsnode), identities and
// grants from headscale's policy (its grants carry coily's app
// capability), revocation by deleting a node, and the bridge.

// hsTailnetPolicy is headscale's policy: who may reach the trust point's
// port at all, and what coily's app capability grants each caller.
// tag:stranger may connect but is granted nothing.
const hsTailnetPolicy = `{
  "tagOwners": {"tag:coily": [], "tag:agent": [], "tag:stranger": [], "tag:bridge": []},
  "grants": [
    {"src": ["alice@", "tag:agent", "tag:stranger", "tag:bridge"], "dst": ["tag:coily"], "ip": ["tcp:7443"]},
    {"src": ["alice@"], "dst": ["tag:coily"], "app": {"coily.dev/cap/coily": [{"roles": ["owner"]}]}},
    {"src": ["tag:agent"], "dst": ["tag:coily"], "app": {"coily.dev/cap/coily": [{"roles": ["agent"], "commands": ["date"]}]}},
    {"src": ["tag:bridge"], "dst": ["tag:coily"], "app": {"coily.dev/cap/coily": [{"roles": ["bridge"]}]}}
  ]
}`

// hsCoilyPolicy is the trust point's own policy: what the roles the
// capability names mean. No grant names a tailnet principal: everything
// a tailnet caller holds comes from headscale.
const hsCoilyPolicy = `version: 1
roles:
  operator: {permissions: [status, keys, lockout, unlock]}
  owner: {permissions: [exec, lockout, pause, resume, status], commands: ["*"]}
  agent: {permissions: [exec, status], commands: [echo]}
  bridge: {permissions: [relay], sandboxes: [demo]}
  demo-sandbox: {permissions: [exec], commands: [echo]}
grants:
  - {principals: ["sandbox:demo"], roles: [demo-sandbox]}
commands:
  - {name: echo, binary: /bin/echo, args: ["**"], flags: any, sandbox: native}
  - {name: date, binary: /bin/date, sandbox: native}
`

// hsTrust is a trust point serving on a headscale tailnet.
type hsTrust struct {
	hs     *headscaletest.Server
	log    *testlog.Buffer
	socket string
	env    []string // every coily process's: trust headscale's certificate, stay offline
}

// startHeadscaleTrust starts headscale and `coily serve --tailnet` joined
// to it as tag:coily.
func startHeadscaleTrust(t *testing.T, o headscaletest.Options) *hsTrust {
	t.Helper()
	return startHeadscaleTrustPolicy(t, o, hsCoilyPolicy)
}

// startHeadscaleTrustPolicy is startHeadscaleTrust with the trust point's
// policy coilyPolicy.
func startHeadscaleTrustPolicy(t *testing.T, o headscaletest.Options, coilyPolicy string) *hsTrust {
	t.Helper()
	if o.Policy == "" {
		o.Policy = hsTailnetPolicy
	}
	hs := headscaletest.Start(t, o)
	dir := shortDir(t)
	pol, keyFile := filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "authkey")
	if err := os.WriteFile(pol, []byte(coilyPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, []byte(hs.AuthKey(t, headscaletest.Key{Tags: []string{"tag:coily"}})), 0o600); err != nil {
		t.Fatal(err)
	}
	h := &hsTrust{hs: hs, log: new(testlog.Buffer), socket: filepath.Join(dir, "coily.sock"),
		env: append(append(os.Environ(), hs.Env()...), devnet.OfflineEnv()...)}
	srv := exec.Command(coilyBin, "serve", "--tailnet", "--hostname", "coily", "--control-url", hs.URL,
		"--authkey-file", keyFile, "--state-dir", dir, "--policy", pol)
	srv.Env, srv.Stdout, srv.Stderr = h.env, h.log, h.log
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = srv.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = srv.Process.Signal(syscall.SIGTERM)
		<-exited
		if t.Failed() {
			t.Logf("coily serve:\n%s", h.log)
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(h.log.String(), "tailnet=coily:7443") {
		select {
		case <-exited:
			t.Fatalf("serve --tailnet exited")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve --tailnet did not come up on headscale")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return h
}

// hsClient is one client machine: a --tsnet state directory and the
// auth key its first command registers with.
type hsClient struct {
	h        *hsTrust
	hostname string
	state    string
	key      string // TS_AUTHKEY
}

func (h *hsTrust) client(t *testing.T, hostname, key string) *hsClient {
	return &hsClient{h: h, hostname: hostname, state: filepath.Join(shortDir(t), "tsnet"), key: key}
}

// run runs `coily --tsnet --server coily …` and times the whole process.
func (c *hsClient) run(t testing.TB, args ...string) (cliRun, time.Duration) {
	t.Helper()
	cmd := exec.Command(coilyBin, append([]string{"--tsnet", "--server", "coily", "--control-url", c.h.hs.URL,
		"--hostname", c.hostname, "--tsnet-state", c.state}, args...)...)
	cmd.Env = slices.Clone(c.h.env)
	if c.key != "" {
		cmd.Env = append(cmd.Env, "TS_AUTHKEY="+c.key)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return cliRun{code: code, stdout: out.String(), stderr: errb.String()}, took
}

// hsCaller is what `coily status --json` says about the caller.
type hsCaller struct {
	Principal   string   `json:"principal"`
	Transport   string   `json:"transport"`
	Roles       []string `json:"roles"`
	Permissions []string `json:"permissions"`
	Peer        string   `json:"peer"`
}

// status runs `status --json` and returns the caller it reports.
func (c *hsClient) status(t *testing.T) hsCaller {
	t.Helper()
	r, took := c.run(t, "status", "--json")
	if r.code != 0 {
		t.Fatalf("status over headscale: exit %d after %v\nstdout: %s\nstderr: %s", r.code, took, r.stdout, r.stderr)
	}
	var st struct {
		Caller hsCaller `json:"caller"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	return st.Caller
}

// TestHeadscaleIdentityGrantsLockout: a user's node and tagged nodes are
// the principals headscale names them (a user login without a domain),
// hold what headscale's grants give through coily's app capability and
// nothing else; a lockout from the tailnet holds until the local operator
// unlocks, which no tailnet caller may do.
func TestHeadscaleIdentityGrantsLockout(t *testing.T) {
	h := startHeadscaleTrust(t, headscaletest.Options{LowLatency: true})
	alice := h.client(t, "alice-laptop", h.hs.AuthKey(t, headscaletest.Key{User: h.hs.CreateUser(t, "alice").ID}))
	agent := h.client(t, "agent-box", h.hs.AuthKey(t, headscaletest.Key{Tags: []string{"tag:agent"}}))
	stranger := h.client(t, "stranger-box", h.hs.AuthKey(t, headscaletest.Key{Tags: []string{"tag:stranger"}}))

	c := alice.status(t)
	if c.Principal != "alice" || c.Transport != "tailnet" || !slices.Equal(c.Roles, []string{"owner"}) ||
		!strings.HasPrefix(c.Peer, "alice-laptop."+headscaletest.MagicDNSDomain+" ") {
		t.Fatalf("alice's node: %+v; want principal alice (no domain: a headscale login) via tailnet, roles [owner] from the app capability", c)
	}
	c = agent.status(t)
	if c.Principal != "tag:agent" || !slices.Equal(c.Roles, []string{"agent"}) {
		t.Fatalf("tagged node: %+v; want tag:agent with roles [agent]", c)
	}

	for _, tt := range []struct {
		who  *hsClient
		args []string
		code int
		out  string
		err  string
	}{
		{agent, []string{"exec", "--", "/bin/echo", "hi"}, 0, "hi\n", ""}, // the agent role's rule
		{agent, []string{"exec", "--", "/bin/date"}, 0, "", ""},           // granted by name in the capability
		{agent, []string{"exec", "--", "/bin/sh", "-c", "true"}, 125, "", "coily: refused (policy-deny)"},
		{agent, []string{"resume"}, 125, "", "coily: refused (permission-denied)"},
		{stranger, []string{"status"}, 125, "", "coily: refused (permission-denied)"},
		{stranger, []string{"exec", "--", "/bin/echo", "hi"}, 125, "", "coily: refused (permission-denied)"},
	} {
		r, _ := tt.who.run(t, tt.args...)
		if r.code != tt.code || (tt.out != "" && r.stdout != tt.out) || !strings.HasPrefix(r.stderr, tt.err) {
			t.Errorf("%v: exit %d stdout %q stderr %q; want %d %q %q", tt.args, r.code, r.stdout, r.stderr, tt.code, tt.out, tt.err)
		}
	}

	// Lockout from the tailnet; unlock only on the host.
	if r, _ := alice.run(t, "lockout", "--reason", "headscale test"); r.code != 0 {
		t.Fatalf("lockout from alice's node: exit %d: %s", r.code, r.stderr)
	}
	if r, _ := agent.run(t, "exec", "--", "/bin/echo", "hi"); r.code != 125 || !strings.HasPrefix(r.stderr, "coily: refused (lockout-active)") {
		t.Fatalf("exec during a lockout: exit %d stderr %q; want refused (lockout-active)", r.code, r.stderr)
	}
	if r, _ := alice.run(t, "unlock"); r.code != 125 || !strings.HasPrefix(r.stderr, "coily: refused (permission-denied)") {
		t.Fatalf("unlock from the tailnet: exit %d stderr %q; want refused (permission-denied)", r.code, r.stderr)
	}
	if r := runCoily(t, nil, "--socket", h.socket, "unlock"); r.code != 0 {
		t.Fatalf("unlock on the local socket: exit %d: %s", r.code, r.stderr)
	}
	if r, _ := agent.run(t, "exec", "--", "/bin/echo", "again"); r.code != 0 || r.stdout != "again\n" {
		t.Fatalf("exec after unlock: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
}

// TestHeadscaleBridgeRevocation: the filesystem bridge relays over
// headscale with a node of its own (--tsnet, tag:bridge), and deleting
// that node in headscale cuts it off: requests written after that are
// not served, and a command started from the node's state is told that
// the node is not registered.
func TestHeadscaleBridgeRevocation(t *testing.T) {
	h := startHeadscaleTrust(t, headscaletest.Options{}) // headscale's own batching: the delay users get
	local, err := client.DialLocal(h.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	issued, err := local.API.IssueKey(ctx, &coilyv1.IssueKeyRequest{Sandbox: "demo"})
	if err != nil {
		t.Fatalf("IssueKey: %v", err)
	}
	key := issued.GetKey().GetSecret()

	b := h.client(t, "bridge", h.hs.AuthKey(t, headscaletest.Key{Tags: []string{"tag:bridge"}}))
	mount := shortDir(t)
	bridgeLog := new(testlog.Buffer)
	cmd := exec.Command(coilyBin, "--tsnet", "--server", "coily", "--control-url", h.hs.URL, "--hostname", b.hostname,
		"--tsnet-state", b.state, "bridge", "--mount", mount+"=demo")
	cmd.Env = append(slices.Clone(h.env), "TS_AUTHKEY="+b.key)
	cmd.Stdout, cmd.Stderr = bridgeLog, bridgeLog
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-exited
		if t.Failed() {
			t.Logf("bridge:\n%s", bridgeLog)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(descriptor.Path(mount, descriptor.TmpDir, "")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the bridge did not join and create .coily/")
		}
		time.Sleep(20 * time.Millisecond)
	}
	id := descriptor.NewID()
	bridgeE2EPut(t, mount, id, bridgeE2ERequest(t, key, id, "/bin/echo", "over headscale"))
	r := bridgeE2EAnswer(t, mount, id, bridgeLog)
	if out, _ := r.Stdout(); r.Outcome != descriptor.OutcomeExit || r.ExitCode != 0 || string(out) != "over headscale\n" {
		t.Fatalf("relayed over headscale: outcome %q code %q message %q stdout %q", r.Outcome, r.Code, r.Message, out)
	}

	node, ok := h.hs.NodeByName(t, "bridge")
	if !ok {
		t.Fatalf("no node called bridge in headscale: %+v", h.hs.Nodes(t))
	}
	h.hs.DeleteNode(t, node.ID)
	deleted := time.Now()
	served := 0
	for {
		if time.Since(deleted) > 30*time.Second {
			t.Fatalf("the bridge's node was deleted %v ago and its requests are still served (%d)", time.Since(deleted), served)
		}
		id := descriptor.NewID()
		put := time.Now()
		bridgeE2EPut(t, mount, id, bridgeE2ERequest(t, key, id, "/bin/echo", "still?"))
		r, ok := hsAnswer(mount, id, 3*time.Second)
		if ok && r.Outcome == descriptor.OutcomeExit {
			served++
			continue
		}
		if ok {
			t.Logf("after the node's deletion: %s (%s: %s)", r.Outcome, r.Code, r.Message)
		}
		t.Logf("headscale node deleted: requests written %v later and after are not served (%d served before)",
			put.Sub(deleted).Round(time.Millisecond), served)
		break
	}

	// A command from the node's state is told it is not registered.
	_ = cmd.Process.Signal(syscall.SIGTERM)
	<-exited
	exited <- nil
	b.key = ""
	run, took := b.run(t, "status")
	if run.code != 69 || !strings.Contains(run.stderr, "not registered") {
		t.Fatalf("status from the deleted node's state: exit %d after %v stderr %q; want 69, not registered", run.code, took, run.stderr)
	}
	// Given an auth key again, it registers anew.
	b.key = h.hs.AuthKey(t, headscaletest.Key{Tags: []string{"tag:bridge"}})
	run, took = b.run(t, "status")
	if run.code != 125 || !strings.Contains(run.stderr, "refused (permission-denied)") {
		t.Fatalf("status from the deleted node's state with a new key: exit %d after %v stderr %q; want the bridge's own refusal (it may only relay)", run.code, took, run.stderr)
	}
	t.Logf("re-registered with a new key in %v", took.Round(time.Millisecond))
}

// hsAnswer waits up to wait for the response to id.
func hsAnswer(mount, id string, wait time.Duration) (*descriptor.Response, bool) {
	p := descriptor.Path(mount, descriptor.ResponsesDir, descriptor.FileName(id))
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		if data, err := os.ReadFile(p); err == nil {
			if r, err := descriptor.ParseResponse(data); err == nil {
				os.Remove(p)
				return r, true
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil, false
}

// hsReuseMedian bounds the median of commands reusing a node. It is well
// under WireGuard's 5 s handshake retry, which is what a command waited
// for when its first handshake was answered to the previous command's
// address; measured medians are 0.1-0.2 s (headscale tuned for latency)
// and about 1 s (its defaults).
const hsReuseMedian = 2 * time.Second

// TestHeadscaleClientStaysJoined: the first `coily --tsnet` command
// registers a node with the auth key; later ones reuse it without a key;
// concurrent commands share the registered nodes without a key and take
// further nodes of the pool with one. Run against headscale as shipped and
// tuned for latency (headscaletest.LowLatencyTuning); the figures are
// logged.
func TestHeadscaleClientStaysJoined(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    headscaletest.Options
	}{{"defaults", headscaletest.Options{}}, {"low-latency", headscaletest.Options{LowLatency: true}}} {
		t.Run(tc.name, func(t *testing.T) {
			h := startHeadscaleTrust(t, tc.o)
			alice := h.hs.CreateUser(t, "alice")
			c := h.client(t, "laptop", h.hs.AuthKey(t, headscaletest.Key{User: alice.ID}))
			r, first := c.run(t, "status")
			if r.code != 0 {
				t.Fatalf("first command: exit %d after %v: %s", r.code, first, r.stderr)
			}
			c.key = "" // the node is registered: no key from now on
			var later, socket []time.Duration
			for range 7 {
				r, took := c.run(t, "status")
				if r.code != 0 {
					t.Fatalf("later command: exit %d after %v: %s", r.code, took, r.stderr)
				}
				later = append(later, took)
				start := time.Now() // the baseline: the same command on the server's local socket
				if r := runCoily(t, nil, "--socket", h.socket, "status"); r.code != 0 {
					t.Fatalf("status on the local socket: exit %d: %s", r.code, r.stderr)
				}
				socket = append(socket, time.Since(start))
			}
			slices.Sort(later)
			slices.Sort(socket)
			t.Logf("headscale %s: first command (joins) %v; later ones (reuse) %v; on the local socket %v",
				tc.name, first.Round(time.Millisecond), roundAll(later), roundAll(socket))
			if m := later[len(later)/2]; m > hsReuseMedian {
				t.Errorf("commands reusing the node: median %v; want at most %v", m, hsReuseMedian)
			}

			// Four at once without a key: they share the one registered node.
			if codes := hsConcurrent(t, c, 4); slices.ContainsFunc(codes, func(c int) bool { return c != 0 }) {
				t.Fatalf("4 concurrent commands sharing one node: exits %v", codes)
			}
			if n := hsNodesNamed(t, h.hs, "laptop"); len(n) != 1 {
				t.Fatalf("nodes after reuse without a key: %v; want only laptop", n)
			}
			// With a reusable key, they take further nodes of the pool.
			c.key = h.hs.AuthKey(t, headscaletest.Key{User: alice.ID, Reusable: true})
			if codes := hsConcurrent(t, c, 4); slices.ContainsFunc(codes, func(c int) bool { return c != 0 }) {
				t.Fatalf("4 concurrent commands with a reusable key: exits %v", codes)
			}
			names := hsNodesNamed(t, h.hs, "laptop")
			if len(names) < 2 || len(names) > 4 || len(slices.Compact(slices.Sorted(slices.Values(names)))) != len(names) {
				t.Fatalf("nodes after concurrent commands with a key: %v; want laptop plus up to 3 more (laptop-2 …), distinct", names)
			}
			t.Logf("pool nodes: %v", names)
		})
	}
}

// hsConcurrent runs n `status` commands of c at once and returns their
// exit codes.
func hsConcurrent(t *testing.T, c *hsClient, n int) []int {
	t.Helper()
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r, _ := c.run(t, "status")
			codes[i] = r.code
			if r.code != 0 {
				t.Logf("concurrent command %d: exit %d: %s", i, r.code, r.stderr)
			}
		})
	}
	wg.Wait()
	return codes
}

// hsNodesNamed lists the headscale nodes whose name is prefix or starts
// with prefix and a dash.
func hsNodesNamed(t *testing.T, hs *headscaletest.Server, prefix string) []string {
	t.Helper()
	var names []string
	for _, n := range hs.Nodes(t) {
		if n.GivenName == prefix || strings.HasPrefix(n.GivenName, prefix+"-") {
			names = append(names, n.GivenName)
		}
	}
	return names
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// TestHeadscaleLeanClientThroughTailscaled: the lean coily-client reaches
// the server through the operating system's tailscaled (its LocalAPI at
// the default socket path), here a real tailscaled (bin/tailscaled, built
// by scripts/tailscaled.sh) in userspace-networking mode, joined to
// headscale with an ephemeral tagged key. It runs in a private mount
// namespace whose /run is a tmpfs, so that the socket is this test's alone.
func TestHeadscaleLeanClientThroughTailscaled(t *testing.T) {
	requireComponent(t, os.Geteuid() == 0, "root (a private mount namespace for tailscaled's socket)")
	unshare, err := exec.LookPath("unshare")
	requireComponent(t, err == nil, "unshare")
	tailscaled := os.Getenv("COILY_TAILSCALED")
	if tailscaled == "" {
		tailscaled, _ = filepath.Abs("../../bin/tailscaled")
	}
	_, err = os.Stat(tailscaled)
	requireComponent(t, err == nil, "bin/tailscaled (scripts/tailscaled.sh)")

	h := startHeadscaleTrust(t, headscaletest.Options{LowLatency: true})
	dir := shortDir(t)
	lean := filepath.Join(dir, "coily-client")
	if out, err := exec.Command("go", "build", "-o", lean, "coily.dev/coily/cmd/coily-client").CombinedOutput(); err != nil {
		t.Fatalf("build coily-client: %v\n%s", err, out)
	}
	key := h.hs.AuthKey(t, headscaletest.Key{Tags: []string{"tag:agent"}, Ephemeral: true})
	conf, err := json.Marshal(map[string]any{"Version": "alpha0", "ServerURL": h.hs.URL, "AuthKey": key,
		"Hostname": "lean-box", "acceptDNS": false})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tailscaled.json"), conf, 0o600); err != nil {
		t.Fatal(err)
	}
	const script = `set -eu
mount -t tmpfs tmpfs /run
mkdir -p /run/tailscale
"$TAILSCALED" --tun=userspace-networking --statedir="$DIR/tsd" --config="$DIR/tailscaled.json" --port=0 --no-logs-no-support >"$DIR/tailscaled.log" 2>&1 &
pid=$!
trap 'kill $pid; wait $pid || true' EXIT
i=0
until "$CLIENT" --server coily status >/dev/null 2>&1; do
  i=$((i+1))
  if [ $i -ge 300 ]; then echo "no answer through tailscaled within 30 s"; tail -30 "$DIR/tailscaled.log"; exit 1; fi
  sleep 0.1
done
for n in 1 2 3 4 5; do
  s=$(date +%s%N); "$CLIENT" --server coily status >/dev/null; echo "took_ms $(( ($(date +%s%N) - s) / 1000000 ))"
done
"$CLIENT" --server coily status --json
"$CLIENT" --server coily exec -- /bin/echo through tailscaled
`
	cmd := exec.Command(unshare, "--mount", "--propagation", "private", "sh", "-c", script)
	cmd.Env = append(slices.Clone(h.env), "TAILSCALED="+tailscaled, "CLIENT="+lean, "DIR="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("coily-client through tailscaled: %v\n%s", err, out)
	}
	var took []string
	var status []string
	for _, line := range strings.Split(string(out), "\n") {
		if ms, ok := strings.CutPrefix(line, "took_ms "); ok {
			took = append(took, ms+"ms")
		} else {
			status = append(status, line)
		}
	}
	text := strings.Join(status, "\n")
	var st struct {
		Caller hsCaller `json:"caller"`
	}
	start, end := strings.Index(text, "{"), strings.LastIndex(text, "}")
	if start < 0 || end < start || json.Unmarshal([]byte(text[start:end+1]), &st) != nil {
		t.Fatalf("no status JSON in:\n%s", out)
	}
	if st.Caller.Principal != "tag:agent" || !strings.HasPrefix(st.Caller.Peer, "lean-box.") {
		t.Fatalf("caller through tailscaled: %+v; want tag:agent from lean-box", st.Caller)
	}
	if !strings.HasSuffix(strings.TrimSpace(text), "through tailscaled") {
		t.Fatalf("exec through tailscaled: output\n%s", out)
	}
	t.Logf("coily-client --server coily status through tailscaled: %v", took)
}

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/internal/headscaletest"
)

// The phone, executed: the release's android/arm64 coily-client run under
// QEMU's user-mode emulation (Debian's qemu-user-static), on a node that
// is what the phone's Tailscale app is — an OS tailscaled with a TUN
// device, joined to headscale as the owner's user — and the Termux:Widget
// scripts of deploy/termux run with `coily` being that client.
//
// The client is a Go binary for Android: static code, no shared library,
// but PIE with Android's loader /system/bin/linker64 as its interpreter,
// which applies its relocative relocations and jumps to it. QEMU finds the
// interpreter under its -L prefix; the prefix's system/bin/linker64 is
// glibc's AArch64 loader (Debian's libc6-arm64-cross), which does the same
// for a binary that needs no library. The binary's bytes, its
// architecture, Go's android runtime (its resolver asks 100.100.100.100,
// there being no /etc/resolv.conf on Android) and the kernel interface
// are the phone's; Android's seccomp filter and SELinux are not here.
//
// The TUN node changes routes, so the test runs in a network namespace of
// its own: it starts itself again under `unshare --net --mount`, and that
// run (COILY_PHONE_NETNS=1) starts headscale, the trust point and the
// phone's tailscaled inside, on loopback.

// phoneTailnetPolicy: alice (the phone's user) reaches the trust point's
// port and holds the phone role through coily's app capability.
const phoneTailnetPolicy = `{
  "tagOwners": {"tag:coily": []},
  "grants": [
    {"src": ["alice@"], "dst": ["tag:coily"], "ip": ["tcp:7443"]},
    {"src": ["alice@"], "dst": ["tag:coily"], "app": {"coily.dev/cap/coily": [{"roles": ["phone"]}]}}
  ]
}`

// phoneCoilyPolicy is docs/phone.md's phone role, and a rule that needs an
// approval (the local operator's request the phone lists).
const phoneCoilyPolicy = `version: 1
roles:
  operator: {permissions: [exec, status], commands: [confirm-echo]}
  phone: {permissions: [lockout, pause, resume, approve, status]}
commands:
  - {name: confirm-echo, binary: /bin/echo, args: ["**"], sandbox: native, confirm: true, confirm_timeout: 5m}
`

// androidLoader is the stand-in for /system/bin/linker64.
const androidLoader = "/usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1"

// TestHeadscalePhoneClient runs the phone's client against a trust point
// on headscale: status as the owner's user, an approvals listing showing a
// pending request, pause and resume, lockout (unlock refused, as it is
// for the host), and the widget scripts' pause and lockout.
func TestHeadscalePhoneClient(t *testing.T) {
	if os.Getenv("COILY_PHONE_NETNS") == "1" {
		phoneInside(t)
		return
	}
	requireComponent(t, os.Geteuid() == 0, "root (a network namespace for the phone's TUN node)")
	unshare, err := exec.LookPath("unshare")
	requireComponent(t, err == nil, "unshare")
	_, err = exec.LookPath("ip")
	requireComponent(t, err == nil, "ip (iproute2)")
	qemu, err := exec.LookPath("qemu-aarch64-static")
	requireComponent(t, err == nil, "qemu-aarch64-static (qemu-user-static)")
	_, err = os.Stat(androidLoader)
	requireComponent(t, err == nil, androidLoader+" (libc6-arm64-cross)")
	_, err = os.Stat("/dev/net/tun")
	requireComponent(t, err == nil, "/dev/net/tun")
	tailscaleBins(t)
	requireComponent(t, headscaletest.Binary() != "", headscaletest.Hint)

	dir := shortDir(t)
	client := filepath.Join(dir, "coily-client")
	build := exec.Command("go", "build", "-trimpath", "-o", client, "coily.dev/coily/cmd/coily-client")
	build.Env = append(os.Environ(), "GOOS=android", "GOARCH=arm64", "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the android/arm64 coily-client: %v\n%s", err, out)
	}
	if err := os.MkdirAll(filepath.Join(dir, "android", "system", "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(androidLoader, filepath.Join(dir, "android", "system", "bin", "linker64")); err != nil {
		t.Fatal(err)
	}
	// `coily` on the phone's PATH: the client under emulation.
	bin := filepath.Join(dir, "bin")
	wrapper := fmt.Sprintf("#!/bin/sh\nexec %q -L %q %q \"$@\"\n", qemu, filepath.Join(dir, "android"), client)
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "coily"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}

	// Inside: loopback up, and /etc without resolv.conf, as on Android
	// (a copy of the host's, bound over it in the private mount namespace).
	const setup = `set -eu
ip link set lo up
cp -a /etc "$PHONE_ETC"
rm -f "$PHONE_ETC/resolv.conf"
mount --bind "$PHONE_ETC" /etc
exec "$@"`
	cmd := exec.Command(unshare, "--net", "--mount", "--propagation", "private", "sh", "-c", setup, "sh",
		os.Args[0], "-test.run", "^TestHeadscalePhoneClient$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "COILY_PHONE_NETNS=1", "COILY_PHONE_BIN="+bin, "PHONE_ETC="+filepath.Join(dir, "etc"), "COILY_TEST_COILY="+coilyBin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		t.Log(line)
	}
	if err != nil || !strings.Contains(out.String(), "--- PASS: TestHeadscalePhoneClient") {
		t.Fatalf("the phone's run in its network namespace: %v", err)
	}
}

// phoneInside is the test inside its network namespace.
func phoneInside(t *testing.T) {
	bin := os.Getenv("COILY_PHONE_BIN")
	h := startHeadscaleTrustPolicy(t, headscaletest.Options{Policy: phoneTailnetPolicy, LowLatency: true}, phoneCoilyPolicy)
	alice := h.hs.CreateUser(t, "alice")
	phone := startOSNode(t, h.hs, h.env, "alice-phone", h.hs.AuthKey(t, headscaletest.Key{User: alice.ID}), "coilyphone0", nil,
		"--netfilter-mode=off")
	peer := phone.waitPeer(t, "coily", nil)
	server := "coily." + headscaletest.MagicDNSDomain // the full MagicDNS name, as docs/phone.md says

	env := append(slices.Clone(h.env), "PATH="+bin+":"+os.Getenv("PATH"))
	coily := func(args ...string) (cliRun, time.Duration) {
		t.Helper()
		cmd := exec.Command(filepath.Join(bin, "coily"), append([]string{"--server", server}, args...)...)
		cmd.Env = env
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
	must := func(args ...string) string {
		t.Helper()
		r, _ := coily(args...)
		if r.code != 0 {
			t.Fatalf("phone: coily %v: exit %d\nstdout: %s\nstderr: %s\ntailscaled:\n%s", args, r.code, r.stdout, r.stderr, phone.log)
		}
		return r.stdout
	}

	// First contact, then the same command again.
	r, first := coily("status", "--json")
	if r.code != 0 {
		t.Fatalf("phone: first status: exit %d\nstdout: %s\nstderr: %s\ntailscaled:\n%s", r.code, r.stdout, r.stderr, phone.log)
	}
	var st struct {
		Caller hsCaller `json:"caller"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	if st.Caller.Principal != "alice" || st.Caller.Transport != "tailnet" || !slices.Equal(st.Caller.Roles, []string{"phone"}) ||
		!strings.HasPrefix(st.Caller.Peer, "alice-phone.") {
		t.Fatalf("the phone's caller: %+v; want alice via tailnet from alice-phone, roles [phone]", st.Caller)
	}
	var again []time.Duration
	for range 3 {
		_, took := coily("status")
		again = append(again, took.Round(time.Millisecond))
	}
	t.Logf("phone (emulated): first status %v, then %v", first.Round(time.Millisecond), again)
	if len(peer.TailscaleIP) > 0 { // what the name lookup and the process's start cost, for docs/benchmarks.md
		byAddr := exec.Command(filepath.Join(bin, "coily"), "--server", peer.TailscaleIP[0], "status")
		byAddr.Env = env
		start := time.Now()
		if out, err := byAddr.CombinedOutput(); err != nil {
			t.Fatalf("status by the server's tailnet address: %v\n%s", err, out)
		}
		addrTook := time.Since(start)
		start = time.Now()
		if out, err := exec.Command(filepath.Join(bin, "coily"), "version").CombinedOutput(); err != nil {
			t.Fatalf("coily version: %v\n%s", err, out)
		}
		t.Logf("phone (emulated): status by address %v, version %v", addrTook.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	}

	// A request waiting for approval, listed on the phone.
	id, done := pendingExec(t, &serveProc{socket: h.socket}, "/bin/echo", "from", "the", "host")
	if out := must("approvals", "list"); !strings.Contains(out, id) || !strings.Contains(out, "confirm-echo") {
		t.Fatalf("approvals list on the phone:\n%s\nwant %s (confirm-echo)", out, id)
	}

	// Pause and resume from the terminal; then the widget's pause.
	if out := must("pause", "--reason", "from the phone"); !strings.Contains(out, "paused by alice") {
		t.Fatalf("pause: %s", out)
	}
	if out := must("resume"); !strings.Contains(out, "resumed by alice") {
		t.Fatalf("resume: %s", out)
	}
	scripts, err := filepath.Abs("../../deploy/termux")
	if err != nil {
		t.Fatal(err)
	}
	envFile := filepath.Join(shortDir(t), "phone.env")
	if err := os.WriteFile(envFile, []byte("COILY_SERVER="+server+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	widget := func(name string) string {
		t.Helper()
		// Termux:Widget runs the file; its #! is Termux's sh, so the
		// host's runs it here.
		cmd := exec.Command("sh", filepath.Join(scripts, name))
		cmd.Env = append(slices.Clone(env), "COILY_PHONE_ENV="+envFile)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("widget %s: %v\n%s", name, err, out)
		}
		return string(out)
	}
	if out := widget("coily-pause"); !strings.Contains(out, "paused by alice") {
		t.Fatalf("widget coily-pause: %s", out)
	}
	if out := must("status"); !regexp.MustCompile(`(?m)^pause:\s+ACTIVE .* by alice \(paused from the phone\)$`).MatchString(out) {
		t.Fatalf("status after the pause widget:\n%s", out)
	}
	must("resume")

	// Lockout from the terminal: the pending request is rejected; unlock
	// is the host's.
	if out := must("lockout", "--reason", "phone drill"); !strings.Contains(out, "locked out by alice") {
		t.Fatalf("lockout: %s", out)
	}
	select {
	case r := <-done:
		if r.code != 125 || !strings.Contains(r.stderr, "lockout-active") {
			t.Fatalf("the pending request after the phone's lockout: %+v", r)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the pending request outlived the lockout")
	}
	if r, _ := coily("unlock"); r.code != 125 || !strings.Contains(r.stderr, "permission-denied") {
		t.Fatalf("unlock from the phone: %+v; want refused (permission-denied)", r)
	}
	if r := runCoily(t, nil, "--socket", h.socket, "unlock"); r.code != 0 {
		t.Fatalf("unlock on the host: %+v", r)
	}

	// The widget's lockout.
	if out := widget("coily-lockout"); !strings.Contains(out, "locked out by alice") {
		t.Fatalf("widget coily-lockout: %s", out)
	}
	if out := must("status"); !regexp.MustCompile(`(?m)^lockout:\s+ACTIVE .* by alice \(one-tap lockout from the phone\)$`).MatchString(out) {
		t.Fatalf("status after the lockout widget:\n%s", out)
	}
	if r := runCoily(t, nil, "--socket", h.socket, "unlock"); r.code != 0 {
		t.Fatalf("unlock on the host: %+v", r)
	}
}

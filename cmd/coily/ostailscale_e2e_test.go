package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"coily.dev/coily/internal/headscaletest"
	"coily.dev/coily/internal/testlog"
	"coily.dev/coily/internal/toolbin"
)

// An operating system's tailscaled and its CLI, the real ones
// (bin/tailscaled and bin/tailscale, built by scripts/tailscaled.sh from
// the tailscale.com version coily pins), joined to the test's headscale:
// what an owner's laptop, the trust point's host and a phone's Tailscale
// app run. Each daemon has its own state directory and LocalAPI socket,
// so several run side by side and none is the machine's.

// tailscaleBins returns tailscaled and the tailscale CLI ($COILY_TAILSCALED,
// $COILY_TAILSCALE, else bin/), failing under CI=true when one is missing.
func tailscaleBins(t *testing.T) (daemon, cli string) {
	t.Helper()
	daemon = toolbin.Find("COILY_TAILSCALED", "tailscaled")
	cli = toolbin.Find("COILY_TAILSCALE", "tailscale")
	requireComponent(t, daemon != "" && cli != "", "bin/tailscaled and bin/tailscale (scripts/tailscaled.sh)")
	return daemon, cli
}

// osNode is one running tailscaled.
type osNode struct {
	cli, sock, dir string
	env            []string
	log            *testlog.Tail
}

// startOSNode starts tailscaled (userspace networking unless tun names a
// TUN device) and joins it to hs as hostname with key, by the CLI's `up`
// with upFlags added. start, when set, starts the daemon (inside a
// network namespace, say).
func startOSNode(t *testing.T, hs *headscaletest.Server, env []string, hostname, key, tun string, start func(*exec.Cmd) error, upFlags ...string) *osNode {
	t.Helper()
	daemon, cli := tailscaleBins(t)
	dir := shortDir(t)
	n := &osNode{cli: cli, sock: filepath.Join(dir, "tailscaled.sock"), dir: dir, env: env, log: testlog.NewTail(64 << 10)}
	if tun == "" {
		tun = "userspace-networking"
	}
	cmd := exec.Command(daemon, "--tun="+tun, "--statedir="+filepath.Join(dir, "state"), "--socket="+n.sock,
		"--port=0", "--no-logs-no-support")
	cmd.Env, cmd.Stdout, cmd.Stderr = env, n.log, n.log
	toolbin.DieWithTest(cmd)
	if start == nil {
		start = (*exec.Cmd).Start
	}
	if err := start(cmd); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("tailscaled %s (tail):\n%s", hostname, n.log)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(n.sock); err == nil {
			break
		}
		select {
		case <-exited:
			t.Fatalf("tailscaled %s exited:\n%s", hostname, n.log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("tailscaled %s: no LocalAPI socket after 30 s:\n%s", hostname, n.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	args := append([]string{"up", "--login-server=" + hs.URL, "--authkey=" + key, "--hostname=" + hostname,
		"--accept-dns=false", "--timeout=60s"}, upFlags...)
	if out, err := n.run(args...); err != nil {
		t.Fatalf("tailscale up (%s): %v\n%s\ntailscaled:\n%s", hostname, err, out, n.log)
	}
	return n
}

// command is the CLI against this daemon, its environment the node's
// (HOME in the node's directory: `tailscale ssh` keeps its known hosts
// under it).
func (n *osNode) command(args ...string) *exec.Cmd {
	cmd := exec.Command(n.cli, append([]string{"--socket=" + n.sock}, args...)...)
	cmd.Env = append(append([]string(nil), n.env...), "HOME="+n.dir, "XDG_CONFIG_HOME="+filepath.Join(n.dir, "config"))
	return cmd
}

// run runs the CLI with a minute's deadline and returns its output.
func (n *osNode) run(args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := n.command(args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.Bytes(), err
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-done
		return out.Bytes(), errors.New("tailscale " + strings.Join(args, " ") + ": no answer within a minute")
	}
}

// osPeer is what `tailscale status --json` says of a peer.
type osPeer struct {
	HostName    string   `json:"HostName"`
	DNSName     string   `json:"DNSName"`
	Online      bool     `json:"Online"`
	TailscaleIP []string `json:"TailscaleIPs"`
	SSHHostKeys []string `json:"sshHostKeys"`
	Relay       string   `json:"Relay"`
}

// waitPeer polls `tailscale status --json` until the peer called
// hostname is online with a home relay (a path to it: see
// tailnet-offline's one flake) and ok says it is ready.
func (n *osNode) waitPeer(t *testing.T, hostname string, ok func(osPeer) bool) osPeer {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var last []byte
	for {
		out, err := n.run("status", "--json")
		last = out
		if err == nil {
			var st struct {
				Peer map[string]osPeer `json:"Peer"`
			}
			if json.Unmarshal(out, &st) == nil {
				for _, p := range st.Peer {
					if p.HostName == hostname && p.Online && p.Relay != "" && (ok == nil || ok(p)) {
						return p
					}
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("peer %s not ready within 60 s; last status:\n%s", hostname, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

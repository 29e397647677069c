package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"coily.dev/coily/sandbox"
)

// runNetBridge runs inside a sandbox in proxied network mode (hidden
// command `__netbridge`): it serves the egress proxy's unix socket on the
// sandbox's own loopback, points the proxy variables at it, runs the
// command and exits with its status. Nothing else leaves the namespace.
func runNetBridge(ctx context.Context, e *env) int {
	fs := flag.NewFlagSet("__netbridge", flag.ContinueOnError)
	socket := fs.String("proxy-socket", "", "the egress proxy's unix socket")
	argv0 := fs.String("argv0", "", "argv[0] of the command (default: its path)")
	knownHosts := fs.String("known-hosts", "", "the rule's pinned ssh host keys: git over ssh goes through the proxy and trusts these alone")
	fs.SetOutput(e.stderr)
	if err := fs.Parse(e.args); err != nil {
		return 2
	}
	if *socket == "" || fs.NArg() == 0 {
		fmt.Fprintln(e.stderr, "usage: coily __netbridge --proxy-socket PATH [--known-hosts PATH] -- ARGV...")
		return 2
	}
	var sshEnv []string
	if *knownHosts != "" {
		self, err := os.Executable()
		if err == nil {
			var cmd string
			cmd, err = gitSSHCommand(self, *knownHosts)
			sshEnv = []string{"GIT_SSH_COMMAND=" + cmd}
		}
		if err != nil {
			printLine(e.stderr, "coily: bridge: %v", err)
			return 125
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		printLine(e.stderr, "coily: bridge: %v", err)
		return 125
	}
	var wg sync.WaitGroup
	go serveBridge(l, *socket, &wg)
	cmd := exec.CommandContext(ctx, fs.Arg(0), fs.Args()[1:]...)
	if *argv0 != "" {
		cmd.Args[0] = *argv0
	}
	cmd.Env = bridgeEnv(os.Environ(), l.Addr().(*net.TCPAddr).AddrPort(), sshEnv)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = e.stdin, e.stdout, e.stderr
	err = cmd.Run()
	l.Close()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	case err != nil:
		printLine(e.stderr, "coily: bridge: %v", err)
		return 127
	}
	return 0
}

// bridgeEnv is the command's environment inside the bridge: base without
// any proxy variable of its own, every proxy variable in both spellings
// pointing at the bridge's listener at ap, and ssh's settings.
func bridgeEnv(base []string, ap netip.AddrPort, sshEnv []string) []string {
	return append(sandbox.WithProxyEnv(base, ap), sshEnv...)
}

// serveBridge splices every loopback connection to the proxy socket. A
// client's half-close reaches the proxy (which passes it upstream), so a
// peer may still answer after it; the proxy's end ends the connection.
func serveBridge(l net.Listener, socket string, wg *sync.WaitGroup) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			up, err := net.Dial("unix", socket)
			if err != nil {
				return
			}
			defer up.Close()
			_ = splice(c, c, up, up)
		}()
	}
}

// gitSSHCommand is GIT_SSH_COMMAND for a sandbox whose rule pins ssh host
// keys: ssh reads no configuration file (-F /dev/null: ~/.ssh/config,
// which the command may write, and /etc/ssh/ssh_config are ignored),
// trusts only the keys in knownHosts (the sandbox's ~/.ssh/known_hosts and
// the system's are not read, unknown and changed keys are refused), and
// reaches the host through the egress proxy (`coily __egress-connect`,
// self being this executable as the sandbox sees it).
//
// This protects the command from a man in the middle; it is not what
// confines it: the command controls its children's environment and may
// run ssh otherwise, but whatever it runs reaches only what the proxy's
// allowlist allows.
func gitSSHCommand(self, knownHosts string) (string, error) {
	if !safeSSHPath(knownHosts) {
		return "", fmt.Errorf("known hosts path %q must be absolute, clean, and of letters, digits, '/', '.', '_' and '-'", knownHosts)
	}
	// Two shells read this: git's (sh -c "$GIT_SSH_COMMAND ..."), then
	// ssh's for the ProxyCommand, after ssh expands %-tokens in it.
	proxy := strings.ReplaceAll(shellQuote(self), "%", "%%") + " " + EgressConnectCommand + " %h %p"
	return "ssh -F /dev/null -o UserKnownHostsFile=" + knownHosts +
		" -o GlobalKnownHostsFile=/dev/null -o StrictHostKeyChecking=yes -o " +
		shellQuote("ProxyCommand="+proxy), nil
}

// safeSSHPath reports whether path can be written in an ssh option as it
// is: ssh splits UserKnownHostsFile at spaces and expands ~ and % in it.
func safeSSHPath(path string) bool {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return false
	}
	for _, c := range []byte(path) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("/._-", c) >= 0) {
			return false
		}
	}
	return true
}

// Package tailnet reaches a coily server over the operating system's
// tailscale (coily --server): through tailscaled's LocalAPI, or as plain
// TCP to the server's MagicDNS name. It is a package of its own so that
// a client that never uses it (coily-exec, the shims) does not link
// tailscale's LocalAPI client.
package tailnet

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"time"

	"tailscale.com/client/local"
	"tailscale.com/paths"

	"coily.dev/coily/client"
)

// hostPort adds client.DefaultPort to a bare host.
func hostPort(server string) string {
	if _, _, err := net.SplitHostPort(server); err == nil {
		return server
	}
	return net.JoinHostPort(server, strconv.Itoa(client.DefaultPort))
}

// DialServer connects to a coily server over the operating system's
// tailscale: through tailscaled's LocalAPI when it answers (which works
// in userspace-networking mode too: containers, the macOS app), else as
// plain TCP to the server's MagicDNS name (a kernel tailscale routes it;
// on Android, where the Tailscale app does, see tailnetResolver).
// WireGuard encrypts and authenticates the link; the server identifies
// this node with WhoIs. Several servers are one to the client
// (client.NewServers). The connection is made lazily: the first call
// reports an unreachable server.
func DialServer(ctx context.Context, servers ...string) (*client.Client, error) {
	lc := &local.Client{}
	viaLocalAPI := localAPIUp(ctx, lc)
	var targets []client.Target
	for _, server := range servers {
		target := hostPort(server)
		host, portStr, _ := net.SplitHostPort(target)
		port, err := strconv.ParseUint(portStr, 10, 16)
		if err != nil {
			return nil, &client.DialError{Err: fmt.Errorf("server %s: bad port", server)}
		}
		dial := dnsDialer(target, tailnetResolver(runtime.GOOS, os.Stat))
		if viaLocalAPI {
			dial = func(ctx context.Context) (net.Conn, error) { return lc.DialTCP(ctx, host, uint16(port)) }
		}
		targets = append(targets, client.Target{Dial: dial, Name: target})
	}
	if len(targets) == 0 {
		return nil, &client.DialError{Err: fmt.Errorf("no server")}
	}
	return client.NewServers(targets, nil), nil
}

// resolvConf is where Go's own resolver finds the DNS servers to ask.
const resolvConf = "/etc/resolv.conf"

// magicDNS is Tailscale's resolver, on every device of a tailnet that
// uses MagicDNS (the Tailscale apps' "Use Tailscale DNS", on by default).
const magicDNS = "100.100.100.100:53"

// tailnetResolver names the DNS server that resolves the server's name
// when tailscaled's LocalAPI does not answer: "" for the system's. Android
// has no /etc/resolv.conf, and the phone's client is built without cgo
// (the release's android/arm64 coily-client, run in Termux), so Go's own
// resolver would ask 127.0.0.1:53, where nothing answers. A phone joins
// the tailnet with the Tailscale app, which answers MagicDNS names at
// 100.100.100.100: there, the client asks it. A tailnet address as the
// server needs no DNS at all.
func tailnetResolver(goos string, stat func(string) (os.FileInfo, error)) string {
	if goos != "android" {
		return ""
	}
	if _, err := stat(resolvConf); err == nil {
		return ""
	}
	return magicDNS
}

// dnsDialer dials hostport over TCP, its name resolved by the system's
// resolver, or by dnsServer (host:port) when it is not "".
func dnsDialer(hostport, dnsServer string) func(context.Context) (net.Conn, error) {
	d := &net.Dialer{}
	if dnsServer != "" {
		d.Resolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var dd net.Dialer
			return dd.DialContext(ctx, network, dnsServer)
		}}
	}
	return func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "tcp", hostport) }
}

// localAPIMayAnswer says whether asking the LocalAPI at socket is worth
// it. On Linux and Android the LocalAPI is that unix socket, and without
// it nothing answers; asking anyway waits, as tailscale's client retries
// a missing socket for the first two seconds of the process's life (a
// tailscaled may be starting): every command of the phone's, whose
// Tailscale app has no socket Termux can reach, paid those two seconds
// (TestHeadscalePhoneClient, docs/benchmarks.md). Elsewhere (the macOS
// app's LocalAPI is found by other means) it is asked.
func localAPIMayAnswer(goos, socket string, stat func(string) (os.FileInfo, error)) bool {
	if goos != "linux" && goos != "android" {
		return true
	}
	_, err := stat(socket)
	return err == nil
}

// localAPIUp says whether this machine's tailscaled answers its LocalAPI
// (briefly: a missing daemon answers at once).
func localAPIUp(ctx context.Context, lc *local.Client) bool {
	if !localAPIMayAnswer(runtime.GOOS, paths.DefaultTailscaledSocket(), os.Stat) {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := lc.StatusWithoutPeers(ctx)
	return err == nil
}

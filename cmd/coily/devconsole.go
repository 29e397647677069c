//go:build coilydev

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"path/filepath"
	"time"

	"tailscale.com/tsnet"
	"tailscale.com/types/logger"

	"coily.dev/coily/console"
	"coily.dev/coily/internal/devnet"
)

// devConsoleBanner is logged when coily dev's console gateway serves.
const devConsoleBanner = "DEV ONLY: the console on this loopback URL acts as the dev owner (tag:owner) for anyone on this machine who opens it; NOT FOR PRODUCTION"

// devConsole is coily dev's way to the web console from a local browser:
// a node of its own on the dev tailnet, tagged tag:owner, and a loopback
// gateway that forwards the browser's requests over the tailnet from
// that node (console.Gateway). The console identifies the browser as that
// node, by WhoIs, as it would any caller.
type devConsole struct {
	node *tsnet.Server
	ln   net.Listener
	gw   *console.Gateway
	done chan error
}

// listenDevConsole joins the owner's node and opens the gateway's loopback
// listener, so that its URL is known before the server serves.
func listenDevConsole(ctx context.Context, controlURL, dir, listen string, tsLog logger.Logf) (*devConsole, error) {
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("dev console: %w", err)
	}
	if !l.Addr().(*net.TCPAddr).IP.IsLoopback() {
		l.Close()
		return nil, fmt.Errorf("dev console: %s is not a loopback address", listen)
	}
	node, err := devnet.Join(ctx, controlURL, devnet.NodeOptions{Dir: filepath.Join(dir, "tsnet-console"),
		Hostname: "coily-console", Tags: []string{"tag:owner"}, Ephemeral: true, Logf: tsLog})
	if err != nil {
		l.Close()
		return nil, err
	}
	return &devConsole{node: node, ln: l, done: make(chan error, 1)}, nil
}

// url is the gateway's loopback URL, for a local browser.
func (d *devConsole) url() string { return "http://" + d.ln.Addr().String() + "/" }

// start serves the gateway to the console at consoleURL (the server's
// tailnet URL, HTTP on the dev tailnet) once the server's node is
// reachable.
func (d *devConsole) start(ctx context.Context, log *slog.Logger, consoleURL string) error {
	u, err := url.Parse(consoleURL)
	if err != nil || u.Scheme != "http" {
		return fmt.Errorf("dev console: the console is at %q; the gateway forwards plain HTTP on the dev tailnet only", consoleURL)
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := devnet.WaitReachable(rctx, d.node, "coily"); err != nil {
		return fmt.Errorf("dev console: %w", err)
	}
	d.gw = &console.Gateway{Dial: d.node.Dial, Target: net.JoinHostPort(u.Hostname(), "80"), Host: u.Hostname(), Logger: log}
	go func() { d.done <- d.gw.Serve(d.ln) }()
	log.Warn(devConsoleBanner, "url", d.url())
	return nil
}

// close stops the gateway and leaves the tailnet.
func (d *devConsole) close() {
	if d == nil {
		return
	}
	if d.gw != nil {
		d.gw.Close()
		if err := <-d.done; err != nil && !errors.Is(err, net.ErrClosed) {
			slog.Default().Debug("dev console gateway", "err", err)
		}
	} else {
		d.ln.Close()
	}
	d.node.Close()
}

package main

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"tailscale.com/tsnet"

	"coily.dev/coily/keystore"
	"coily.dev/coily/notify"
)

// notifyCloseTimeout bounds the delivery of what is queued at shutdown.
const notifyCloseTimeout = 5 * time.Second

// startNotifier starts the dispatcher of the policy's notify block; the
// returned stop delivers what is queued, for a few seconds at most. Its
// console URL, used when the policy names none, is consoleURL, the
// console this server serves (--web), else the tailnet node's:
// https://<name> when the tailnet issues certificates, http://<name>
// otherwise (docs/operations.md, "Notifications").
func startNotifier(ctx context.Context, log *slog.Logger, ks *keystore.Keystore, reg prometheus.Registerer, node *tsnet.Server, consoleURL string) (*notify.Dispatcher, func(), error) {
	if consoleURL == "" {
		consoleURL = nodeConsoleURL(ctx, log, node)
	}
	cfg := notify.Config{Keystore: ks, Logger: log, Metrics: reg, ConsoleURL: consoleURL}
	if node != nil {
		// An ntfy server or a webhook on the tailnet is reached through
		// the node (MagicDNS names included), others directly.
		cfg.HTTPClient = node.HTTPClient()
	}
	d, err := notify.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	return d, func() {
		ctx, cancel := context.WithTimeout(context.Background(), notifyCloseTimeout)
		defer cancel()
		if err := d.Close(ctx); err != nil {
			log.Warn("notifications still queued at shutdown were cancelled", "err", err)
		}
	}, nil
}

// nodeConsoleURL is the console's address on the node's MagicDNS name, or
// "" when there is no node or no name.
func nodeConsoleURL(ctx context.Context, log *slog.Logger, node *tsnet.Server) string {
	if node == nil {
		return ""
	}
	lc, err := node.LocalClient()
	if err != nil {
		return ""
	}
	st, err := lc.StatusWithoutPeers(ctx)
	if err != nil {
		log.Warn("tailnet status unavailable: notifications link no console unless the policy names notify.console_url", "err", err)
		return ""
	}
	if len(st.CertDomains) > 0 {
		return "https://" + st.CertDomains[0]
	}
	if st.Self != nil {
		if name := strings.TrimSuffix(st.Self.DNSName, "."); name != "" {
			return "http://" + name
		}
	}
	return ""
}

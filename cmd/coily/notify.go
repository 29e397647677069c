package main

import (
	"context"
	"log/slog"
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
// console URL, used when the policy names none, is consoleURL: the
// console this server serves (--web), or "" when it serves none, and
// notifications then name CLI commands instead of buttons that would
// lead nowhere (docs/operations.md, "Notifications").
func startNotifier(log *slog.Logger, ks *keystore.Keystore, reg prometheus.Registerer, node *tsnet.Server, consoleURL string) (*notify.Dispatcher, func(), error) {
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

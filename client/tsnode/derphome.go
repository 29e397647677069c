package tsnode

import (
	"context"
	"time"

	"tailscale.com/client/local"
	"tailscale.com/ipn"
)

// derpHomeWait bounds waitDERPHomeKnown.
const derpHomeWait = 3 * time.Second

// waitDERPHomeKnown waits (at most derpHomeWait) until the control server
// knows this node's home DERP relay, as the node's own netmap shows. A
// server that has no direct path to this node yet (a node registered a
// moment ago) can answer the first WireGuard handshake only through that
// relay; with no relay known for the node it drops the answer ("no UDP or
// DERP addr"), and WireGuard retries only after 5 s. The server hears of
// the relay in the same update as this node.
func waitDERPHomeKnown(ctx context.Context, lc *local.Client) {
	ctx, cancel := context.WithTimeout(ctx, derpHomeWait)
	defer cancel()
	w, err := lc.WatchIPNBus(ctx, ipn.NotifyInitialNetMap)
	if err != nil {
		return
	}
	defer w.Close()
	for {
		n, err := w.Next()
		if err != nil {
			return
		}
		// The initial netmap is the one place that shows what control
		// last said about this node (Status shows the node's own choice);
		// it is still sent on every platform to a watcher asking for it.
		//lint:ignore SA1019 see above; tailscale.com is pinned
		if n.NetMap != nil && n.NetMap.SelfNode.Valid() && n.NetMap.SelfNode.HomeDERP() != 0 ||
			n.SelfChange != nil && n.SelfChange.HomeDERP != 0 {
			return
		}
	}
}

package tsnode

import (
	"context"
	"errors"
	"fmt"

	"tailscale.com/ipn"
	"tailscale.com/tsnet"
)

// ErrNotRegistered is returned by Dial when the node has no registration
// the control server accepts (never registered, removed by the tailnet's
// admin, or its key expired) and no auth key was given to register it.
var ErrNotRegistered = errors.New("this node is not registered on the tailnet (never joined, removed, or expired): give an auth key (TS_AUTHKEY) to register it")

// bringUp starts s and waits until it runs. Unlike tsnet's Up it gives up
// at once when the control server wants an interactive login and there is
// no auth key to answer it, instead of waiting out the join timeout.
func bringUp(ctx context.Context, s *tsnet.Server, haveKey bool) error {
	lc, err := s.LocalClient() // starts the node
	if err != nil {
		return err
	}
	w, err := lc.WatchIPNBus(ctx, ipn.NotifyInitialState)
	if err != nil {
		return err
	}
	defer w.Close()
	for {
		n, err := w.Next()
		if err != nil {
			return err
		}
		switch {
		case n.ErrMessage != nil:
			return fmt.Errorf("tailnet node: %s", *n.ErrMessage)
		case n.BrowseToURL != nil && *n.BrowseToURL != "" && !haveKey:
			return ErrNotRegistered
		case n.State != nil && *n.State == ipn.Running:
			_, err := s.Up(ctx) // running already: tsnet's own first-time settings
			return err
		}
	}
}

package tsservice

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"tailscale.com/ipn"
)

// withdrawTimeout bounds Close's calls to the node.
const withdrawTimeout = 5 * time.Second

// withdraw removes the port's handler (and the Service's entry, once it
// has no port left) and, where Listen added it, the advertisement.
func (l *Listener) withdraw(ctx context.Context) error {
	lc, err := l.node.LocalClient()
	if err != nil {
		return err
	}
	var errs []error
	sc, err := lc.GetServeConfig(ctx)
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("tsservice: serve config: %w", err))
	case sc != nil && sc.Services[l.name] != nil && sc.Services[l.name].TCP[l.port] != nil:
		c := sc.Services[l.name]
		delete(c.TCP, l.port)
		if len(c.TCP) == 0 && len(c.Web) == 0 {
			delete(sc.Services, l.name)
		}
		if err := lc.SetServeConfig(ctx, sc); err != nil {
			errs = append(errs, fmt.Errorf("tsservice: serve config: %w", err))
		}
	}
	if l.added {
		prefs, err := lc.GetPrefs(ctx)
		if err == nil {
			adv := slices.DeleteFunc(slices.Clone(prefs.AdvertiseServices), func(s string) bool { return s == l.name.String() })
			_, err = lc.EditPrefs(ctx, &ipn.MaskedPrefs{AdvertiseServicesSet: true, Prefs: ipn.Prefs{AdvertiseServices: adv}})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("tsservice: withdraw %s: %w", l.name, err))
		}
	}
	return errors.Join(errs...)
}

package notify

import (
	"context"
	"slices"
	"sync"

	"coily.dev/coily/keystore"
)

// secretCache keeps the last value read of each secret the policy names
// for the sinks, for when the keystore cannot answer.
type secretCache struct {
	mu   sync.Mutex
	last map[keystore.Ref]string
}

// keepOnly forgets the values of references no longer named.
func (c *secretCache) keepOnly(refs []keystore.Ref) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for ref := range c.last {
		if !slices.Contains(refs, ref) {
			delete(c.last, ref)
		}
	}
}

func (c *secretCache) put(ref keystore.Ref, v string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == nil {
		c.last = map[keystore.Ref]string{}
	}
	c.last[ref] = v
}

func (c *secretCache) get(ref keystore.Ref) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.last[ref]
	return v, ok
}

// secret reads ref through the keystore ("" for the zero reference). When
// the keystore fails, the last value read is used if there is one.
func (d *Dispatcher) secret(ctx context.Context, ref keystore.Ref) (string, error) {
	if ref == (keystore.Ref{}) {
		return "", nil
	}
	var err error
	if d.cfg.Keystore == nil {
		err = &keystore.Error{Ref: ref, Err: keystore.ErrNoBackend}
	} else {
		var set *keystore.Set
		if set, err = d.cfg.Keystore.Fetch(ctx, map[string]keystore.Ref{"v": ref}); err == nil {
			v := set.Values["v"]
			for _, l := range set.Leases {
				// A notification secret has no use for a lease.
				_ = d.cfg.Keystore.RevokeLease(context.WithoutCancel(ctx), l)
			}
			d.secrets.put(ref, v)
			return v, nil
		}
	}
	if v, ok := d.secrets.get(ref); ok {
		d.log.Warn("keystore unavailable for a notification secret; using the value read last", "ref", ref.String(), "err", err)
		return v, nil
	}
	return "", err
}

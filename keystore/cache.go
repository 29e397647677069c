package keystore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"
)

// DefaultCacheTTL is how long a fetched value is reused when Config leaves
// CacheTTL at zero. A negative CacheTTL disables the cache.
const DefaultCacheTTL = 30 * time.Second

// DefaultTimeout bounds one backend fetch.
const DefaultTimeout = 10 * time.Second

// A LockoutHook is a backend with something to do on Lockout beyond
// dropping cached values (the vault backend may revoke its token).
type LockoutHook interface {
	Lockout(ctx context.Context) error
}

// Config configures a Keystore.
type Config struct {
	// Backends by name (BackendVault, BackendKeychain, BackendFile); a
	// reference to a backend not configured is refused with ErrNoBackend.
	Backends map[string]Backend
	// CacheTTL is how long a value is reused: 0 means DefaultCacheTTL,
	// negative means never.
	CacheTTL time.Duration
	// Timeout bounds each backend fetch (0 means DefaultTimeout).
	Timeout time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Keystore fetches credentials through its backends and caches them
// briefly. It is safe for concurrent use.
//
// References to one secret of a GroupBackend (the same backend and path)
// are fetched with one read, so their values belong together; a read that
// carries a lease (a dynamic secret) is never cached.
type Keystore struct {
	cfg Config

	mu    sync.Mutex
	gen   uint64 // bumped by Drop: a fetch begun before it caches nothing
	cache map[Ref]cached
}

// cached is one read's values: by field for a GroupBackend (keyed by the
// reference without its field), under "" for others (keyed by the whole
// reference).
type cached struct {
	values  map[string]string
	expires time.Time
}

// New returns a Keystore over cfg's backends.
func New(cfg Config) *Keystore {
	if cfg.CacheTTL == 0 {
		cfg.CacheTTL = DefaultCacheTTL
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Keystore{cfg: cfg, cache: map[Ref]cached{}}
}

// Has reports whether the backend a reference names is configured.
func (k *Keystore) Has(backend string) bool {
	return k != nil && k.cfg.Backends[backend] != nil
}

// Fetch returns the value of every reference in refs, keyed as refs is
// (by the environment name each is injected as), and the leases of the
// dynamic secrets among them, which the caller revokes when it is done
// (RevokeLease). It fails on the first reference that cannot be fetched,
// with an *Error naming it; then no value is returned and the leases
// already acquired are revoked.
func (k *Keystore) Fetch(ctx context.Context, refs map[string]Ref) (*Set, error) {
	set := &Set{Values: make(map[string]string, len(refs))}
	for _, g := range k.groups(refs) {
		vals, lease, err := k.fetchGroup(ctx, g.key, g.refs)
		if err != nil {
			clear(set.Values)
			k.revokeAll(ctx, set.Leases)
			return nil, err
		}
		for name, ref := range refs {
			if k.cacheKey(ref) == g.key {
				set.Values[name] = vals[ref.Field]
			}
		}
		if lease != nil {
			set.Leases = append(set.Leases, *lease)
		}
	}
	return set, nil
}

// group is the references read together: one secret of a GroupBackend,
// or a single reference of another backend.
type group struct {
	key  Ref
	refs []Ref // distinct, sorted by field
}

// groups splits refs into reads, in a stable order.
func (k *Keystore) groups(refs map[string]Ref) []group {
	byKey := map[Ref][]Ref{}
	for _, ref := range refs {
		key := k.cacheKey(ref)
		if !slices.Contains(byKey[key], ref) {
			byKey[key] = append(byKey[key], ref)
		}
	}
	out := make([]group, 0, len(byKey))
	for key, rs := range byKey {
		slices.SortFunc(rs, func(a, b Ref) int { return strings.Compare(a.Field, b.Field) })
		out = append(out, group{key: key, refs: rs})
	}
	slices.SortFunc(out, func(a, b group) int { return strings.Compare(a.key.String(), b.key.String()) })
	return out
}

// cacheKey is the reference without its field for a GroupBackend (one
// read serves every field), the reference itself otherwise.
func (k *Keystore) cacheKey(ref Ref) Ref {
	if k != nil {
		if _, ok := k.cfg.Backends[ref.Backend].(GroupBackend); ok {
			ref.Field = ""
		}
	}
	return ref
}

// fetchGroup returns the values of refs by field (under "" for a backend
// that is not a GroupBackend), from the cache when it holds every one,
// and the read's lease.
func (k *Keystore) fetchGroup(ctx context.Context, key Ref, refs []Ref) (map[string]string, *Lease, error) {
	if k == nil {
		return nil, nil, &Error{Ref: refs[0], Err: ErrNoBackend}
	}
	k.mu.Lock()
	c, ok := k.cache[key]
	gen := k.gen
	k.mu.Unlock()
	if ok && k.cfg.Now().Before(c.expires) && hasFields(c.values, refs) {
		return c.values, nil, nil
	}
	b := k.cfg.Backends[key.Backend]
	if b == nil {
		return nil, nil, &Error{Ref: refs[0], Err: fmt.Errorf("%w: the server has no %s backend", ErrNoBackend, key.Backend)}
	}
	fctx, cancel := context.WithTimeout(ctx, k.cfg.Timeout)
	defer cancel()
	vals, lease, err := k.read(fctx, b, refs)
	if err != nil {
		var ke *Error
		if errors.As(err, &ke) {
			return nil, nil, err
		}
		if fctx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("%w: no answer within %s", ErrUnreachable, k.cfg.Timeout)
		}
		return nil, nil, &Error{Ref: refs[0], Err: err}
	}
	if lease == nil && k.cfg.CacheTTL > 0 {
		k.mu.Lock()
		if k.gen == gen {
			// One read's values, replacing any other read's: a hit
			// never mixes two versions of a secret.
			k.cache[key] = cached{values: vals, expires: k.cfg.Now().Add(k.cfg.CacheTTL)}
		}
		k.mu.Unlock()
	}
	return vals, lease, nil
}

// read reads refs with one call of a GroupBackend, or the one reference
// of another backend.
func (k *Keystore) read(ctx context.Context, b Backend, refs []Ref) (map[string]string, *Lease, error) {
	if gb, ok := b.(GroupBackend); ok {
		return gb.FetchGroup(ctx, refs)
	}
	v, err := b.Fetch(ctx, refs[0])
	if err != nil {
		return nil, nil, err
	}
	return map[string]string{refs[0].Field: v}, nil, nil
}

func hasFields(vals map[string]string, refs []Ref) bool {
	for _, r := range refs {
		if _, ok := vals[r.Field]; !ok {
			return false
		}
	}
	return true
}

// Drop forgets every cached value: the cache no longer holds or serves
// them (their bytes are not wiped: see the package doc).
func (k *Keystore) Drop() {
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.gen++
	clear(k.cache)
}

// Lockout drops every cached value and runs the backends' lockout hooks
// (see LockoutHook), returning their errors joined.
func (k *Keystore) Lockout(ctx context.Context) error {
	if k == nil {
		return nil
	}
	k.Drop()
	var errs []error
	for _, b := range k.cfg.Backends {
		if h, ok := b.(LockoutHook); ok {
			errs = append(errs, h.Lockout(ctx))
		}
	}
	return errors.Join(errs...)
}

// Close closes the backends that hold resources (io.Closer).
func (k *Keystore) Close() error {
	if k == nil {
		return nil
	}
	k.Drop()
	var errs []error
	for _, b := range k.cfg.Backends {
		if c, ok := b.(io.Closer); ok {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}

// A Checker is a backend that can tell whether it would answer now
// without fetching a secret (the server's readiness).
type Checker interface {
	Check(ctx context.Context) error
}

// Check reports whether each named backend is configured and, when it
// can tell (Checker), would answer now. Each check is bounded by the
// fetch timeout; the errors, joined, name the backend and never a value.
func (k *Keystore) Check(ctx context.Context, backends []string) error {
	var errs []error
	for _, name := range backends {
		b := k.backend(name)
		if b == nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, ErrNoBackend))
			continue
		}
		c, ok := b.(Checker)
		if !ok {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, k.cfg.Timeout)
		err := c.Check(cctx)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

func (k *Keystore) backend(name string) Backend {
	if k == nil {
		return nil
	}
	return k.cfg.Backends[name]
}

package keystore

import (
	"context"
	"errors"
	"fmt"
	"io"
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
type Keystore struct {
	cfg Config

	mu    sync.Mutex
	gen   uint64 // bumped by Drop: a fetch begun before it caches nothing
	cache map[Ref]cached
}

type cached struct {
	value   string
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
// (by the environment name each is injected as). It fails on the first
// reference that cannot be fetched, with an *Error naming it; then no
// value is returned.
func (k *Keystore) Fetch(ctx context.Context, refs map[string]Ref) (map[string]string, error) {
	out := make(map[string]string, len(refs))
	for name, ref := range refs {
		v, err := k.fetch(ctx, ref)
		if err != nil {
			clear(out)
			return nil, err
		}
		out[name] = v
	}
	return out, nil
}

func (k *Keystore) fetch(ctx context.Context, ref Ref) (string, error) {
	if k == nil {
		return "", &Error{Ref: ref, Err: ErrNoBackend}
	}
	now := k.cfg.Now()
	k.mu.Lock()
	c, ok := k.cache[ref]
	gen := k.gen
	k.mu.Unlock()
	if ok && now.Before(c.expires) {
		return c.value, nil
	}
	b := k.cfg.Backends[ref.Backend]
	if b == nil {
		return "", &Error{Ref: ref, Err: fmt.Errorf("%w: the server has no %s backend", ErrNoBackend, ref.Backend)}
	}
	fctx, cancel := context.WithTimeout(ctx, k.cfg.Timeout)
	defer cancel()
	v, err := b.Fetch(fctx, ref)
	if err != nil {
		var ke *Error
		if errors.As(err, &ke) {
			return "", err
		}
		if fctx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("%w: no answer within %s", ErrUnreachable, k.cfg.Timeout)
		}
		return "", &Error{Ref: ref, Err: err}
	}
	if k.cfg.CacheTTL > 0 {
		k.mu.Lock()
		if k.gen == gen {
			k.cache[ref] = cached{value: v, expires: k.cfg.Now().Add(k.cfg.CacheTTL)}
		}
		k.mu.Unlock()
	}
	return v, nil
}

// Drop forgets every cached value.
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

package keystore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/vault/api"
)

// Vault auth methods (VaultConfig.Auth).
const (
	VaultAuthToken   = "token"
	VaultAuthAppRole = "approle"
)

// VaultConfig configures the vault backend. Everything else (address, TLS,
// timeouts, retries) comes from the VAULT_* environment variables, read as
// the vault CLI reads them (VAULT_ADDR, VAULT_CACERT, VAULT_CAPATH,
// VAULT_CLIENT_CERT, VAULT_CLIENT_KEY, VAULT_TLS_SERVER_NAME,
// VAULT_SKIP_VERIFY, VAULT_CLIENT_TIMEOUT, VAULT_MAX_RETRIES,
// VAULT_NAMESPACE, ...).
type VaultConfig struct {
	// Auth is "token" (the default: VAULT_TOKEN, as the vault CLI reads
	// it, or TokenFile) or "approle".
	Auth string
	// TokenFile, when set, holds the token instead of VAULT_TOKEN (read
	// once, at NewVault).
	TokenFile string
	// RoleID is the AppRole role id (approle).
	RoleID string
	// SecretIDFile holds the AppRole secret id (approle); it is re-read at
	// each login.
	SecretIDFile string
	// Mount is the AppRole auth mount ("approle" when empty).
	Mount string
	// Namespace is the Vault Enterprise namespace; VAULT_NAMESPACE works
	// too, as in the CLI, and this field wins over it.
	Namespace string
	// RevokeOnLockout makes Lockout revoke the server's own token
	// (auth/token/revoke-self).
	RevokeOnLockout bool
	// Logger receives login, renewal and revocation events (never a token
	// or a value); nil discards them.
	Logger *slog.Logger
}

// Vault is the vault backend: it reads fields of KV (v1 or v2) secrets.
//
// References name the secret as `vault kv get` takes it, mount included
// ("secret/coily/github"), and the field. The mount and its KV version are
// found as the vault CLI finds them, with the preflight request
// GET sys/internal/ui/mounts/<path>, cached per mount. When the preflight
// is refused (403), the first path segment is taken as the mount and KV v2
// is assumed (not cached); when it answers 404 (a Vault without the
// endpoint), KV v1, as the CLI does.
//
// Tokens: a renewable token with a TTL is renewed by the API's
// LifetimeWatcher; the token's expiry is tracked (TTL at login or lookup,
// extended at each renewal). With token auth, once the watcher gives up (a
// renewal error it could not retry past, or the max TTL reached), the
// tracked expiry passes, Vault calls the token invalid (a 403 naming
// "invalid token", or a 403 on a read followed by a refused lookup-self,
// which any token that passed NewVault could do) or Lockout revokes it,
// every later Fetch fails with ErrRenewal ("...; restart with a fresh
// token") until the server restarts. With approle, the next Fetch logs in
// again instead (a read refused because the token went invalid is retried
// once after that login); a refused login fails the Fetch with ErrRenewal,
// an unreachable Vault with ErrUnreachable.
//
// It is safe for concurrent use; logins are serialized.
type Vault struct {
	cfg         VaultConfig
	log         *slog.Logger
	base        *api.Client // configuration and headers; no token
	staticToken string      // token auth

	loginMu chan struct{} // held (full) during a login or a revocation

	mu     sync.Mutex
	sess   *vaultSession // nil: log in (approle) or look up (token) first
	failed error         // token auth: the token is gone for good (wraps ErrRenewal)
	closed bool
	mounts map[string]int // mount path ("secret/") → KV version

	bg sync.WaitGroup // watcher goroutines
}

// vaultSession is one token in use.
type vaultSession struct {
	client  *api.Client // carries the token
	token   string      // to scrub it from messages, should a server echo it
	auth    *api.SecretAuth
	expires time.Time // zero: no TTL (guarded by Vault.mu)
	watcher *api.LifetimeWatcher
	stopped bool // guarded by Vault.mu
}

// NewVault returns a vault backend configured from cfg and the VAULT_*
// environment. It logs in (approle) or looks the token up
// (auth/token/lookup-self), and starts renewing the token when it is
// renewable, so that a server whose Vault is unreachable or refuses it
// says so at start. Its errors wrap ErrUnreachable, ErrDenied or
// ErrRenewal when they come from Vault; callers may prefix them with
// "vault: ".
func NewVault(ctx context.Context, cfg VaultConfig) (*Vault, error) {
	if cfg.Auth == "" {
		cfg.Auth = VaultAuthToken
	}
	if cfg.Mount == "" {
		cfg.Mount = "approle"
	}
	cfg.Mount = strings.Trim(cfg.Mount, "/")
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	conf := api.DefaultConfig() // runs conf.ReadEnvironment(): the VAULT_* variables
	if conf.Error != nil {
		return nil, fmt.Errorf("configuration from the environment: %w", conf.Error)
	}
	base, err := api.NewClient(conf) // reads VAULT_TOKEN, VAULT_NAMESPACE
	if err != nil {
		return nil, err
	}
	if cfg.Namespace != "" {
		base.SetNamespace(cfg.Namespace)
	}
	v := &Vault{cfg: cfg, log: log, base: base, mounts: map[string]int{}, loginMu: make(chan struct{}, 1)}
	switch cfg.Auth {
	case VaultAuthToken:
		v.staticToken = base.Token()
		if cfg.TokenFile != "" {
			b, err := os.ReadFile(cfg.TokenFile)
			if err != nil {
				return nil, fmt.Errorf("reading the token file: %w", err)
			}
			v.staticToken = strings.TrimSpace(string(b))
		}
		if v.staticToken == "" {
			return nil, errors.New("no token: set VAULT_TOKEN or a token file")
		}
	case VaultAuthAppRole:
		if cfg.RoleID == "" || cfg.SecretIDFile == "" {
			return nil, errors.New("approle auth needs a role id and a secret id file")
		}
	default:
		return nil, fmt.Errorf("unknown auth method %q (want token or approle)", cfg.Auth)
	}
	base.ClearToken()

	s, err := v.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	v.installLocked(s)
	v.mu.Unlock()
	return v, nil
}

// Fetch returns the field ref names. Errors are *Error wrapping one of
// ErrNotFound, ErrDenied, ErrUnreachable or ErrRenewal.
func (v *Vault) Fetch(ctx context.Context, ref Ref) (string, error) {
	val, err := v.fetch(ctx, ref)
	if err != nil {
		return "", &Error{Ref: ref, Err: err}
	}
	return val, nil
}

func (v *Vault) fetch(ctx context.Context, ref Ref) (string, error) {
	for attempt := 0; ; attempt++ {
		s, err := v.session(ctx)
		if err != nil {
			return "", err
		}
		val, err := v.read(ctx, s, ref)
		var ve *vaultError
		if err == nil || !errors.As(err, &ve) || ve.kind != ErrDenied || ctx.Err() != nil {
			return val, err
		}
		// Denied: a policy, or a token that expired or was revoked
		// behind the watcher's back?
		if !v.tokenInvalid(ctx, s, ve.resp) {
			return "", err
		}
		gone := v.invalidate(s, "vault token is no longer valid (expired or revoked)")
		if gone != nil || attempt > 0 {
			if gone != nil {
				return "", gone
			}
			return "", err
		}
		// approle: log in again and retry once.
	}
}

// session returns the token to use, logging in or looking the token up
// first when there is none.
func (v *Vault) session(ctx context.Context) (*vaultSession, error) {
	v.mu.Lock()
	s, err := v.usableLocked()
	v.mu.Unlock()
	if s != nil || err != nil {
		return s, err
	}
	if err := v.lockLogin(ctx); err != nil {
		return nil, err
	}
	defer v.unlockLogin()
	v.mu.Lock()
	s, err = v.usableLocked()
	v.mu.Unlock()
	if s != nil || err != nil {
		return s, err
	}
	s, err = v.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return nil, errVaultClosed
	}
	v.installLocked(s)
	return s, nil
}

var errVaultClosed = fmt.Errorf("%w: vault backend closed", ErrUnreachable)

// lockLogin takes the login lock, giving up when ctx ends first (a fetch
// waiting behind a slow login keeps to its deadline).
func (v *Vault) lockLogin(ctx context.Context) error {
	select {
	case v.loginMu <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: no vault login within the deadline", ErrUnreachable)
	}
}

func (v *Vault) unlockLogin() { <-v.loginMu }

// usableLocked returns the current session if it can be used, nil and no
// error if a login (or lookup) is due, or the error every fetch gets.
func (v *Vault) usableLocked() (*vaultSession, error) {
	if v.closed {
		return nil, errVaultClosed
	}
	if v.failed != nil {
		return nil, v.failed
	}
	s := v.sess
	if s == nil {
		return nil, nil
	}
	if !s.expires.IsZero() && !time.Now().Before(s.expires) {
		v.dropLocked(s, fmt.Sprintf("vault token expired at %s", s.expires.UTC().Format(time.RFC3339)))
		return nil, v.failed
	}
	return s, nil
}

// invalidate drops s, if it is still the current session, because of
// why. For token auth it returns the error every later fetch gets; for
// approle nil (the next fetch logs in again).
func (v *Vault) invalidate(s *vaultSession, why string) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.sess == s {
		v.dropLocked(s, why)
	}
	return v.failed
}

// dropLocked forgets s (the current session) and stops its watcher.
func (v *Vault) dropLocked(s *vaultSession, why string) {
	v.sess = nil
	s.stopLocked()
	if v.cfg.Auth == VaultAuthToken {
		v.failed = fmt.Errorf("%w: %s; restart with a fresh token", ErrRenewal, why)
		v.log.Warn("vault token unusable; every vault fetch fails until restart", "reason", why)
		return
	}
	v.log.Info("vault token unusable; logging in again at the next fetch", "reason", why)
}

func (s *vaultSession) stopLocked() {
	if !s.stopped {
		s.stopped = true
		if s.watcher != nil {
			s.watcher.Stop()
		}
	}
}

// authenticate logs in (approle) or looks the token up (token auth) and
// returns the new session, not yet installed.
func (v *Vault) authenticate(ctx context.Context) (*vaultSession, error) {
	if v.cfg.Auth == VaultAuthAppRole {
		return v.login(ctx)
	}
	client, err := v.clientWith(v.staticToken)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnreachable, err)
	}
	sec, err := client.Auth().Token().LookupSelfWithContext(ctx)
	if err != nil {
		ce := v.classify(ctx, "token lookup (auth/token/lookup-self)", err, v.staticToken)
		if errors.Is(ce, ErrUnreachable) {
			return nil, ce
		}
		return nil, fmt.Errorf("%w; check VAULT_TOKEN or the token file", ce)
	}
	if sec == nil {
		return nil, fmt.Errorf("%w: the vault token lookup returned nothing", ErrRenewal)
	}
	ttl, _ := sec.TokenTTL()
	renewable, _ := sec.TokenIsRenewable()
	s := &vaultSession{
		client: client,
		token:  v.staticToken,
		auth:   &api.SecretAuth{ClientToken: v.staticToken, Renewable: renewable, LeaseDuration: int(ttl / time.Second)},
	}
	if ttl > 0 {
		s.expires = time.Now().Add(ttl)
	}
	policies, _ := sec.TokenPolicies()
	v.log.Info("vault token looked up", "addr", v.addr(), "ttl", ttl, "renewable", renewable, "policies", policies)
	return s, nil
}

// login logs in with AppRole.
func (v *Vault) login(ctx context.Context) (*vaultSession, error) {
	b, err := os.ReadFile(v.cfg.SecretIDFile)
	if err != nil {
		return nil, fmt.Errorf("%w: vault approle login: reading the secret id file: %v", ErrRenewal, err)
	}
	secretID := strings.TrimSpace(string(b))
	clear(b)
	lc, err := v.clientWith("")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnreachable, err)
	}
	path := "auth/" + v.cfg.Mount + "/login"
	sec, err := lc.Logical().WriteWithContext(ctx, path, map[string]any{
		"role_id":   v.cfg.RoleID,
		"secret_id": secretID,
	})
	if err != nil {
		ce := v.classify(ctx, "approle login ("+path+")", scrub(err, secretID), secretID)
		if errors.Is(ce, ErrUnreachable) {
			return nil, ce
		}
		v.log.Warn("vault approle login failed", "mount", v.cfg.Mount, "err", ce)
		msg := ce.Error()
		if ve := (*vaultError)(nil); errors.As(ce, &ve) {
			msg = ve.msg
		}
		return nil, fmt.Errorf("%w: %s", ErrRenewal, msg)
	}
	if sec == nil || sec.Auth == nil || sec.Auth.ClientToken == "" {
		return nil, fmt.Errorf("%w: vault approle login returned no token", ErrRenewal)
	}
	client, err := v.clientWith(sec.Auth.ClientToken)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnreachable, err)
	}
	s := &vaultSession{client: client, token: sec.Auth.ClientToken, auth: sec.Auth}
	ttl := time.Duration(sec.Auth.LeaseDuration) * time.Second
	if ttl > 0 {
		s.expires = time.Now().Add(ttl)
	}
	v.log.Info("vault approle login", "addr", v.addr(), "mount", v.cfg.Mount, "ttl", ttl,
		"renewable", sec.Auth.Renewable, "policies", sec.Auth.TokenPolicies)
	return s, nil
}

// clientWith returns a client sharing the base configuration (and HTTP
// connections) with token set, or none.
func (v *Vault) clientWith(token string) (*api.Client, error) {
	c, err := v.base.CloneWithHeaders()
	if err != nil {
		return nil, err
	}
	c.SetToken(token) // a clone reads VAULT_TOKEN again: set or clear it
	if token == "" {
		c.ClearToken()
	}
	return c, nil
}

// installLocked makes s the current session and starts renewing its token
// when it is renewable.
func (v *Vault) installLocked(s *vaultSession) {
	if old := v.sess; old != nil {
		old.stopLocked()
	}
	v.sess = s
	if !s.auth.Renewable || s.auth.LeaseDuration <= 0 {
		return
	}
	w, err := s.client.NewLifetimeWatcher(&api.LifetimeWatcherInput{
		Secret: &api.Secret{Auth: s.auth},
	})
	if err != nil {
		v.log.Warn("vault token renewal not started", "err", err)
		return
	}
	s.watcher = w
	v.bg.Go(func() { v.watch(s, w) })
}

// watch follows the renewal of s's token until the watcher stops.
func (v *Vault) watch(s *vaultSession, w *api.LifetimeWatcher) {
	go w.Start() // returns once it has sent on DoneCh
	for {
		select {
		case r := <-w.RenewCh():
			if r != nil && r.Secret != nil && r.Secret.Auth != nil {
				ttl := time.Duration(r.Secret.Auth.LeaseDuration) * time.Second
				v.mu.Lock()
				if !s.stopped && ttl > 0 {
					s.expires = time.Now().Add(ttl)
				}
				v.mu.Unlock()
				v.log.Debug("vault token renewed", "ttl", ttl)
			}
		case err := <-w.DoneCh():
			v.mu.Lock()
			defer v.mu.Unlock()
			if s.stopped || v.sess != s {
				return
			}
			why := "vault token reached its max TTL"
			if err != nil {
				why = "vault token renewal failed: " + v.short(err, s.token)
				v.log.Warn("vault token renewal failed", "err", v.short(err, s.token))
			}
			v.dropLocked(s, why)
			return
		}
	}
}

// read reads ref with s's token.
func (v *Vault) read(ctx context.Context, s *vaultSession, ref Ref) (string, error) {
	mount, version, err := v.mount(ctx, s, ref.Path)
	if err != nil {
		return "", err
	}
	rest := strings.TrimSuffix(strings.TrimPrefix(ref.Path+"/", mount), "/")
	if rest == "" {
		return "", fmt.Errorf("%w: %s is a mount, not a secret", ErrNotFound, strings.TrimSuffix(mount, "/"))
	}
	apiPath := mount + rest
	if version == 2 {
		apiPath = mount + "data/" + rest
	}
	sec, err := s.client.Logical().ReadWithContext(ctx, apiPath)
	if err != nil {
		return "", v.classify(ctx, "read of "+apiPath, err, s.token)
	}
	if sec == nil || sec.Data == nil {
		return "", fmt.Errorf("%w: no secret at %s", ErrNotFound, apiPath)
	}
	data := sec.Data
	if version == 2 {
		d, _ := sec.Data["data"].(map[string]any)
		if d == nil {
			return "", fmt.Errorf("%w: no current version of the secret at %s (deleted or destroyed)", ErrNotFound, apiPath)
		}
		data = d
	}
	raw, ok := data[ref.Field]
	if !ok {
		return "", fmt.Errorf("%w: the secret at %s has no field %q", ErrNotFound, apiPath, ref.Field)
	}
	val, ok := raw.(string)
	if !ok {
		return "", fmt.Errorf("%w: field %q of the secret at %s is not a string", ErrNotFound, ref.Field, apiPath)
	}
	return val, nil
}

// mount returns the mount path (with a trailing "/") holding path and its
// KV version, asking Vault the way the CLI does (the preflight).
func (v *Vault) mount(ctx context.Context, s *vaultSession, path string) (string, int, error) {
	v.mu.Lock()
	best := ""
	for m := range v.mounts {
		if strings.HasPrefix(path+"/", m) && len(m) > len(best) {
			best = m
		}
	}
	version := v.mounts[best]
	v.mu.Unlock()
	if best != "" {
		return best, version, nil
	}
	first, _, _ := strings.Cut(path, "/")
	sec, err := s.client.Logical().ReadWithContext(ctx, "sys/internal/ui/mounts/"+path)
	if err != nil {
		var re *api.ResponseError
		if errors.As(err, &re) && re.StatusCode == 403 && !mentions(re, "invalid token") {
			// Refused (the token may read the secret but not see its
			// mount): assume KV v2 at the first segment.
			return first + "/", 2, nil
		}
		return "", 0, v.classify(ctx, "mount lookup (sys/internal/ui/mounts)", err, s.token)
	}
	if sec == nil {
		// 404: a Vault without the preflight endpoint: KV v1, as the CLI.
		return first + "/", 1, nil
	}
	m, _ := sec.Data["path"].(string)
	version = 1
	if opts, ok := sec.Data["options"].(map[string]any); ok {
		if ver, _ := opts["version"].(string); ver == "2" {
			version = 2
		}
	}
	if m == "" || !strings.HasSuffix(m, "/") || !strings.HasPrefix(path+"/", m) {
		return first + "/", version, nil // unexpected answer: don't cache it
	}
	v.mu.Lock()
	v.mounts[m] = version
	v.mu.Unlock()
	return m, version, nil
}

// tokenInvalid reports whether a 403 came from s's token being invalid
// (expired or revoked) rather than from a policy: Vault says "invalid
// token", or refuses the token's own lookup-self, which every token that
// passed NewVault could do.
func (v *Vault) tokenInvalid(ctx context.Context, s *vaultSession, re *api.ResponseError) bool {
	if re != nil && mentions(re, "invalid token") {
		return true
	}
	_, err := s.client.Auth().Token().LookupSelfWithContext(ctx)
	var lre *api.ResponseError
	return errors.As(err, &lre) && lre.StatusCode == 403
}

// Lockout revokes the token when RevokeOnLockout is set. Afterwards,
// approle logs in again at the next fetch; token auth fails every fetch
// with ErrRenewal until restart. The token is forgotten even when the
// revocation fails (the error says so).
func (v *Vault) Lockout(ctx context.Context) error {
	if !v.cfg.RevokeOnLockout {
		return nil
	}
	if err := v.lockLogin(ctx); err != nil {
		return fmt.Errorf("vault: revoking the token at lockout: %w", err)
	}
	defer v.unlockLogin()
	v.mu.Lock()
	if v.closed {
		v.mu.Unlock()
		return nil
	}
	s := v.sess
	v.sess = nil
	if s != nil {
		s.stopLocked()
	}
	alreadyGone := v.failed != nil
	if v.cfg.Auth == VaultAuthToken && !alreadyGone {
		v.failed = fmt.Errorf("%w: vault token was revoked at lockout; restart with a fresh token", ErrRenewal)
	}
	v.mu.Unlock()

	client, token := (*api.Client)(nil), ""
	switch {
	case s != nil:
		client, token = s.client, s.token
	case v.cfg.Auth == VaultAuthToken && !alreadyGone:
		c, err := v.clientWith(v.staticToken)
		if err != nil {
			return fmt.Errorf("vault: revoking the token at lockout: %w", err)
		}
		client, token = c, v.staticToken
	default:
		return nil // no token held
	}
	if err := client.Auth().Token().RevokeSelfWithContext(ctx, ""); err != nil {
		err = v.classify(ctx, "token revocation (auth/token/revoke-self)", err, token)
		v.log.Warn("vault token revocation at lockout failed; the token is no longer used", "err", err)
		return fmt.Errorf("vault: revoking the token at lockout: %w", err)
	}
	v.log.Info("vault token revoked at lockout", "auth", v.cfg.Auth)
	return nil
}

// Close stops renewing the token and waits for the renewal goroutine. The
// token is not revoked.
func (v *Vault) Close() error {
	v.mu.Lock()
	v.closed = true
	if s := v.sess; s != nil {
		v.sess = nil
		s.stopLocked()
	}
	v.mu.Unlock()
	v.bg.Wait()
	return nil
}

// vaultError is a classified failure of a Vault request.
type vaultError struct {
	kind error // ErrNotFound, ErrDenied, ErrUnreachable
	msg  string
	resp *api.ResponseError // when Vault answered
}

func (e *vaultError) Error() string { return e.kind.Error() + ": " + e.msg }
func (e *vaultError) Unwrap() error { return e.kind }

// classify turns a failed request (what) into a short error wrapping one
// sentinel: 403/401 denied, 404/400/405 not found, 5xx/429/412 (sealed,
// standby, rate limited) and transport failures unreachable. It never
// includes a response body beyond Vault's error strings, with token
// scrubbed from them.
func (v *Vault) classify(ctx context.Context, what string, err error, token string) error {
	var re *api.ResponseError
	if errors.As(err, &re) {
		detail := ""
		if !re.RawError {
			var msgs []string
			for _, m := range re.Errors {
				for _, l := range strings.Split(m, "\n") {
					// Vault's multierror lines: "2 errors occurred:", "\t* permission denied".
					l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "*"))
					if l == "" || l == "permission denied" || strings.HasSuffix(l, " occurred:") {
						continue
					}
					msgs = append(msgs, l)
				}
			}
			if len(msgs) > 0 {
				detail = ": " + oneLine(strings.Join(msgs, "; "), 160)
			}
			if token != "" {
				detail = strings.ReplaceAll(detail, token, "<token>")
			}
		}
		e := &vaultError{resp: re, msg: fmt.Sprintf("vault refused the %s (%d%s)", what, re.StatusCode, detail)}
		switch {
		case re.StatusCode == 401 || re.StatusCode == 403:
			e.kind = ErrDenied
		case re.StatusCode == 404 || re.StatusCode == 400 || re.StatusCode == 405:
			e.kind = ErrNotFound
		default:
			e.kind = ErrUnreachable
			e.msg = fmt.Sprintf("vault at %s failed the %s (%d%s)", v.addr(), what, re.StatusCode, detail)
			if re.StatusCode == 503 && detail == "" {
				e.msg += ", sealed or in standby?"
			}
		}
		return e
	}
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
		return &vaultError{kind: ErrUnreachable, msg: fmt.Sprintf("no answer from vault at %s to the %s in time", v.addr(), what)}
	}
	return &vaultError{kind: ErrUnreachable, msg: fmt.Sprintf("vault at %s: %s", v.addr(), v.short(err, token))}
}

// short is err's message without the request URL, on one line, with token
// scrubbed.
func (v *Vault) short(err error, token string) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var re *api.ResponseError
	msg := err.Error()
	if errors.As(err, &re) {
		msg = fmt.Sprintf("%d: %s", re.StatusCode, strings.Join(re.Errors, "; "))
		if re.RawError {
			msg = fmt.Sprintf("HTTP %d", re.StatusCode)
		}
	}
	if token != "" {
		msg = strings.ReplaceAll(msg, token, "<token>")
	}
	return oneLine(msg, 200)
}

func (v *Vault) addr() string {
	u, err := url.Parse(v.base.Address())
	if err != nil {
		return "(invalid address)"
	}
	return u.Redacted()
}

// scrub replaces secret in err's message (a login error must not echo the
// secret id).
func scrub(err error, secret string) error {
	if secret == "" || !strings.Contains(err.Error(), secret) {
		return err
	}
	var re *api.ResponseError
	if errors.As(err, &re) {
		c := *re
		c.Errors = nil
		for _, e := range re.Errors {
			c.Errors = append(c.Errors, strings.ReplaceAll(e, secret, "<secret id>"))
		}
		c.URL = strings.ReplaceAll(c.URL, secret, "<secret id>")
		return &c
	}
	return errors.New(strings.ReplaceAll(err.Error(), secret, "<secret id>"))
}

func mentions(re *api.ResponseError, s string) bool {
	for _, e := range re.Errors {
		if strings.Contains(e, s) {
			return true
		}
	}
	return false
}

// oneLine collapses whitespace and cuts s to at most n bytes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}

package keystore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	// TokenFile, when set, holds the token instead of VAULT_TOKEN. It is
	// read at NewVault and again when it changes (checked at most once a
	// second, and at once when Vault refuses a request), as when Vault
	// Agent's file sink writes a new token.
	TokenFile string
	// RoleID is the AppRole role id (approle).
	RoleID string
	// SecretIDFile holds the AppRole secret id (approle); it is re-read at
	// each login.
	SecretIDFile string
	// WrappedSecretIDFile, instead of SecretIDFile, holds a
	// response-wrapping token that wraps the secret id (approle): it is
	// checked (sys/wrapping/lookup: created by an AppRole secret-id
	// request on Mount), unwrapped once at NewVault, and removed; the
	// secret id is then kept in memory only (never written to disk).
	WrappedSecretIDFile string
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

// Vault is the vault backend: it reads fields of KV (v1 or v2) secrets,
// and of dynamic secrets (any other secrets engine, read verbatim).
//
// References name the secret as `vault kv get` (or `vault read`) takes
// it, mount included ("secret/coily/github", "aws/sts/coily-s3"), and the
// field. The mount and what it is are found as the vault CLI finds them,
// with the preflight request GET sys/internal/ui/mounts/<path>, cached
// per mount. When the preflight is refused (403), the first path segment
// is taken as the mount and KV v2 is assumed (not cached); when it
// answers 404 (a Vault without the endpoint), KV v1, as the CLI does. A
// mount of any type but kv is read verbatim (GET <path>).
//
// Every field a caller needs from one path comes from one read
// (FetchGroup). A read that carries a lease (a dynamic secret) returns
// it; RenewLease and RevokeLease act on it (sys/leases/renew,
// sys/leases/revoke).
//
// Tokens: a renewable token with a TTL is renewed by the API's
// LifetimeWatcher; the token's expiry is tracked (TTL at login or lookup,
// extended at each renewal). With token auth, once the watcher gives up (a
// renewal error it could not retry past, or the max TTL reached), the
// tracked expiry passes, Vault calls the token invalid (a 403 naming
// "invalid token", or a 403 on a read followed by a refused lookup-self,
// which any token that passed NewVault could do) or Lockout revokes it,
// every later Fetch fails with ErrRenewal ("...; restart with a fresh
// token") until the server restarts, or, with a token file, until the
// file holds another token. With approle, the next Fetch logs in
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

	tf       *tokenFile // token auth with a token file
	secretID string     // approle with a wrapped secret id: the unwrapped secret id

	mu     sync.Mutex
	sess   *vaultSession // nil: log in (approle) or look up (token) first
	failed error         // token auth: the token is gone for good (wraps ErrRenewal)
	closed bool
	mounts map[string]mountInfo // mount path ("secret/") → what it is

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
	v := &Vault{cfg: cfg, log: log, base: base, mounts: map[string]mountInfo{}, loginMu: make(chan struct{}, 1)}
	switch cfg.Auth {
	case VaultAuthToken:
		v.staticToken = base.Token()
		if cfg.TokenFile != "" {
			tok, fi, err := readTokenFile(cfg.TokenFile)
			if err != nil {
				return nil, err
			}
			v.staticToken, v.tf = tok, &tokenFile{path: cfg.TokenFile, fi: fi, checked: time.Now()}
		}
		if v.staticToken == "" {
			return nil, errors.New("no token: set VAULT_TOKEN or a token file")
		}
	case VaultAuthAppRole:
		if cfg.RoleID == "" || (cfg.SecretIDFile == "") == (cfg.WrappedSecretIDFile == "") {
			return nil, errors.New("approle auth needs a role id and either a secret id file or a wrapped secret id file")
		}
	default:
		return nil, fmt.Errorf("unknown auth method %q (want token or approle)", cfg.Auth)
	}
	base.ClearToken()
	if cfg.WrappedSecretIDFile != "" {
		id, err := v.unwrapSecretID(ctx)
		if err != nil {
			return nil, err
		}
		v.secretID = id
	}

	s, err := v.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	v.installLocked(s)
	v.mu.Unlock()
	return v, nil
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
		v.failed = fmt.Errorf("%w: vault token was revoked at lockout; %s", ErrRenewal, v.freshTokenHint())
	}
	static := v.staticToken
	v.mu.Unlock()

	client, token := (*api.Client)(nil), ""
	switch {
	case s != nil:
		client, token = s.client, s.token
	case v.cfg.Auth == VaultAuthToken && !alreadyGone:
		c, err := v.clientWith(static)
		if err != nil {
			return fmt.Errorf("vault: revoking the token at lockout: %w", err)
		}
		client, token = c, static
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

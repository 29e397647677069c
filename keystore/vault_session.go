package keystore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/vault/api"
)

// session returns the token to use, logging in or looking the token up
// first when there is none.
func (v *Vault) session(ctx context.Context) (*vaultSession, error) {
	v.refreshToken(false)
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
		v.failed = fmt.Errorf("%w: %s; %s", ErrRenewal, why, v.freshTokenHint())
		v.log.Warn("vault token unusable; every vault fetch fails until "+v.freshTokenHint(), "reason", why)
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
	v.mu.Lock()
	token := v.staticToken
	v.mu.Unlock()
	client, err := v.clientWith(token)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnreachable, err)
	}
	sec, err := client.Auth().Token().LookupSelfWithContext(ctx)
	if err != nil {
		ce := v.classify(ctx, "token lookup (auth/token/lookup-self)", err, token)
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
		token:  token,
		auth:   &api.SecretAuth{ClientToken: token, Renewable: renewable, LeaseDuration: int(ttl / time.Second)},
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
	secretID := v.secretID
	if secretID == "" {
		// Held to the token file's rules: one value, not open to others,
		// owned by this server's user or root.
		id, _, err := readSecretFile("the secret id file", v.cfg.SecretIDFile)
		if err != nil {
			return nil, fmt.Errorf("%w: vault approle login: %v", ErrRenewal, err)
		}
		secretID = id
	}
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

// Check reports whether Vault answers and takes the token now: it looks
// the token up (auth/token/lookup-self, which every token may do),
// logging in first when approle has no session. A token that fails the
// lookup is not dropped here: the next fetch finds out for itself.
func (v *Vault) Check(ctx context.Context) error {
	s, err := v.session(ctx)
	if err != nil {
		return err
	}
	if _, err := s.client.Auth().Token().LookupSelfWithContext(ctx); err != nil {
		return v.classify(ctx, "token lookup (auth/token/lookup-self)", err, s.token)
	}
	return nil
}

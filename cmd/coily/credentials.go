package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/pflag"

	"coily.dev/coily/keystore"
)

// keystoreFlags configure where `coily serve` fetches credentials from.
type keystoreFlags struct {
	file            *string
	cache           *time.Duration
	vaultAuth       *string
	vaultTokenFile  *string
	vaultRoleID     *string
	vaultSecretFile *string
	vaultWrapped    *string
	vaultMount      *string
	vaultNamespace  *string
	vaultRevoke     *bool
}

func registerKeystoreFlags(fs *pflag.FlagSet) *keystoreFlags {
	return &keystoreFlags{
		file:            stringFlag(fs, "credentials-file", "COILY_CREDENTIALS_FILE", "", "file of name=value credentials (mode 0600) for file: references"),
		cache:           durationFlag(fs, "credential-cache", "COILY_CREDENTIAL_CACHE", keystore.DefaultCacheTTL, "how long a fetched credential is reused (0: fetch for every Exec)"),
		vaultAuth:       stringFlag(fs, "vault-auth", "COILY_VAULT_AUTH", "", "enable vault: references: token (VAULT_TOKEN or --vault-token-file) or approle; VAULT_ADDR and the other VAULT_* variables work as in the vault CLI"),
		vaultTokenFile:  stringFlag(fs, "vault-token-file", "COILY_VAULT_TOKEN_FILE", "", "with --vault-auth token: read the token from this file instead of VAULT_TOKEN (read again when it changes, e.g. a Vault Agent sink)"),
		vaultRoleID:     stringFlag(fs, "vault-role-id", "COILY_VAULT_ROLE_ID", "", "with --vault-auth approle: the role id"),
		vaultSecretFile: stringFlag(fs, "vault-secret-id-file", "COILY_VAULT_SECRET_ID_FILE", "", "with --vault-auth approle: file holding the secret id"),
		vaultWrapped:    stringFlag(fs, "vault-wrapped-secret-id-file", "COILY_VAULT_WRAPPED_SECRET_ID_FILE", "", "with --vault-auth approle, instead of --vault-secret-id-file: file holding a response-wrapping token of the secret id (deploy/vault-approle.sh --wrap-ttl); unwrapped once at start, then removed"),
		vaultMount:      stringFlag(fs, "vault-approle-mount", "COILY_VAULT_APPROLE_MOUNT", "approle", "with --vault-auth approle: where AppRole is mounted"),
		vaultNamespace:  stringFlag(fs, "vault-namespace", "COILY_VAULT_NAMESPACE", "", "Vault Enterprise namespace (default: $VAULT_NAMESPACE)"),
		vaultRevoke:     boolFlag(fs, "vault-revoke-on-lockout", "COILY_VAULT_REVOKE_ON_LOCKOUT", "revoke the server's own Vault token on Lockout"),
	}
}

// keystoreConfig is what the flags say, ready for openKeystore.
type keystoreConfig struct {
	file  string
	cache time.Duration
	vault *keystore.VaultConfig
}

func (f *keystoreFlags) config() (keystoreConfig, error) {
	c := keystoreConfig{file: *f.file, cache: *f.cache}
	switch *f.vaultAuth {
	case "":
	case "token", "approle":
		c.vault = &keystore.VaultConfig{Auth: *f.vaultAuth, TokenFile: *f.vaultTokenFile, RoleID: *f.vaultRoleID,
			SecretIDFile: *f.vaultSecretFile, WrappedSecretIDFile: *f.vaultWrapped, Mount: *f.vaultMount, Namespace: *f.vaultNamespace, RevokeOnLockout: *f.vaultRevoke}
	default:
		return c, fmt.Errorf("--vault-auth must be token or approle, got %q", *f.vaultAuth)
	}
	return c, nil
}

// openKeystore builds the keystore: the keychain always (a rule naming it
// fails closed where there is none), the credentials file when given, Vault
// when configured (logging in now: a server that cannot reach its Vault at
// start says so instead of failing every request later).
func openKeystore(ctx context.Context, log *slog.Logger, c keystoreConfig) (*keystore.Keystore, error) {
	backends := map[string]keystore.Backend{keystore.BackendKeychain: keystore.NewKeychain()}
	if c.file != "" {
		backends[keystore.BackendFile] = keystore.NewFile(c.file)
	}
	if c.vault != nil {
		vc := *c.vault
		vc.Logger = log.With("component", "vault")
		v, err := keystore.NewVault(ctx, vc)
		if err != nil {
			return nil, fmt.Errorf("vault: %w", err)
		}
		backends[keystore.BackendVault] = v
	}
	ttl := c.cache
	if ttl == 0 {
		ttl = -1 // the flag's 0 means no cache
	}
	return keystore.New(keystore.Config{Backends: backends, CacheTTL: ttl}), nil
}

# Vault policy for the coily server: read-only access to coily's own
# secrets, plus what its Vault client needs to find their mount and to
# keep, and give up, its own token. deploy/vault-approle.sh installs it as
# policy "coily".
#
# Credential references name KV secrets under secret/coily/, e.g.
# vault:secret/coily/github#token. Adjust the paths if your KV mount or
# prefix differs.

# Read coily's secrets. secret/ is a KV version 2 mount: a secret's current
# version is read at secret/data/<path>. Nothing else: no list, no write,
# no metadata (coily reads the current version only, as `vault kv get`
# does, and needs neither version history nor a listing of what exists).
path "secret/data/coily/*" {
  capabilities = ["read"]
}

# For a KV version 1 mount the secret itself is the path instead; uncomment
# if secret/ is KV v1 on your server.
# path "secret/coily/*" {
#   capabilities = ["read"]
# }

# The "preflight": coily asks which mount holds a path, and its KV version,
# as the vault CLI does. Vault answers only about mounts the token may use,
# so this reveals nothing beyond the paths above.
path "sys/internal/ui/mounts/*" {
  capabilities = ["read"]
}

# The token's own lifecycle (the "default" policy grants these too; they
# are here so that the policy works for tokens created without it):
# look itself up (at start, and to tell an expired token from a denied
# read),
path "auth/token/lookup-self" {
  capabilities = ["read"]
}

# renew itself before its TTL runs out (up to the role's token_max_ttl),
path "auth/token/renew-self" {
  capabilities = ["update"]
}

# and revoke itself at a lockout (revoke_on_lockout).
path "auth/token/revoke-self" {
  capabilities = ["update"]
}

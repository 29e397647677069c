# Vault policy for the coily server: read-only access to coily's own
# secrets, the dynamic credentials of its own roles and the leases they
# come with, plus what its Vault client needs to find their mount and to
# keep, and give up, its own token. deploy/vault-approle.sh installs it as
# policy "coily".
#
# Credential references name KV secrets under secret/coily/, e.g.
# vault:secret/coily/github#token, and dynamic ones of roles named
# coily-*, e.g. vault:aws/sts/coily-s3#access_key. Adjust the paths if your
# mounts, prefixes or role names differ.

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

# Dynamic AWS credentials (the AWS secrets engine at aws/) of coily's own
# roles: aws/sts/<role> for STS roles (assumed_role, federation_token),
# aws/creds/<role> for iam_user roles. Each read creates credentials and a
# lease; coily reads once per command and revokes the lease after it.
path "aws/sts/coily-*" {
  capabilities = ["read"]
}
path "aws/creds/coily-*" {
  capabilities = ["read"]
}

# The leases of those reads: renewed while a command runs, if their TTL is
# shorter than its timeout, and revoked when it ends (or at the next start
# of a server that stopped first). Vault lets a token that may update
# sys/leases/revoke revoke any lease whose id it is given, so the lease ids
# are limited to coily's own roles.
path "sys/leases/renew" {
  capabilities = ["update"]
  allowed_parameters = {
    "lease_id"  = ["aws/sts/coily-*", "aws/creds/coily-*"]
    "increment" = []
  }
}
path "sys/leases/revoke" {
  capabilities = ["update"]
  allowed_parameters = {
    "lease_id" = ["aws/sts/coily-*", "aws/creds/coily-*"]
  }
}

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

#!/usr/bin/env bash
# Sets up AppRole login for the coily server on a Vault server, through the
# HTTP API with curl (no vault CLI needed):
#   - enables the AppRole auth method (at approle/) unless it is enabled,
#   - writes deploy/vault-policy.hcl as policy "coily",
#   - creates (or updates) role "coily": tokens with policy coily, TTL 1h,
#     renewable up to 24h,
#   - prints the role id on standard output,
#   - writes a new secret id to a file (mode 0600), never printing it; with
#     --wrap-ttl, a response-wrapping token that wraps it instead.
#
# Usage: deploy/vault-approle.sh [--secret-id-file FILE] [--secret-id-ttl TTL]
#                                [--wrap-ttl TTL] [--bind-cidrs CIDRS] [--policy FILE]
#   --secret-id-file FILE  where to write the secret id (default ./coily-secret-id)
#   --secret-id-ttl TTL    how long a secret id may be used to log in, as Vault
#                          takes durations; default 720h (30 days); 0: no expiry
#   --wrap-ttl TTL         write a response-wrapping token (X-Vault-Wrap-TTL)
#                          valid for TTL ("10m") instead of the secret id: only
#                          its first unwrapping yields the secret id, so a token
#                          someone else unwrapped fails coily's start loudly.
#                          Give the file to coily serve with
#                          --vault-wrapped-secret-id-file; it unwraps it once,
#                          keeps the secret id in memory and removes the file.
#   --bind-cidrs CIDRS     comma-separated networks (e.g. 10.1.2.3/32) the secret id
#                          may log in from and its tokens may be used from
#                          (secret_id_bound_cidrs, token_bound_cidrs): a copied
#                          secret id is useless anywhere else. Recommended: the
#                          coily host's address as Vault sees it. Running the
#                          script again without it keeps the role's bindings
#                          (it updates only what it is given).
#   --policy FILE          the policy (default: vault-policy.hcl beside this script)
#
# It honours VAULT_ADDR and VAULT_TOKEN (required; the token needs to manage
# auth methods, policies and AppRole roles, e.g. a root or admin token), and
# VAULT_NAMESPACE, VAULT_CACERT, VAULT_CAPATH, VAULT_CLIENT_CERT,
# VAULT_CLIENT_KEY and VAULT_SKIP_VERIFY as the vault CLI does. Running it
# again is harmless: it updates the policy and the role, and issues a fresh
# secret id (earlier ones stay valid until their TTL).
#
# Then configure coily with auth approle, the printed role id and the secret
# id file.
set -euo pipefail

secret_id_file=./coily-secret-id
secret_id_ttl=720h
wrap_ttl=
bind_cidrs=
policy_file="$(dirname "$0")/vault-policy.hcl"
mount=approle
role=coily
policy=coily

while [ $# -gt 0 ]; do
  case "$1" in
    --secret-id-file) secret_id_file=${2:?--secret-id-file needs a file}; shift 2 ;;
    --secret-id-file=*) secret_id_file=${1#*=}; shift ;;
    --secret-id-ttl) secret_id_ttl=${2:?--secret-id-ttl needs a duration}; shift 2 ;;
    --secret-id-ttl=*) secret_id_ttl=${1#*=}; shift ;;
    --wrap-ttl) wrap_ttl=${2:?--wrap-ttl needs a duration}; shift 2 ;;
    --wrap-ttl=*) wrap_ttl=${1#*=}; shift ;;
    --bind-cidrs) bind_cidrs=${2:?--bind-cidrs needs networks}; shift 2 ;;
    --bind-cidrs=*) bind_cidrs=${1#*=}; [ -n "$bind_cidrs" ] || { echo "vault-approle.sh: --bind-cidrs needs networks" >&2; exit 2; }; shift ;;
    --policy) policy_file=${2:?--policy needs a file}; shift 2 ;;
    --policy=*) policy_file=${1#*=}; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "vault-approle.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

: "${VAULT_ADDR:?set VAULT_ADDR to the Vault server, e.g. https://vault.example:8200}"
: "${VAULT_TOKEN:?set VAULT_TOKEN to a token that may manage auth methods, policies and roles}"
command -v curl >/dev/null || { echo "vault-approle.sh: curl is required" >&2; exit 1; }
[ -r "$policy_file" ] || { echo "vault-approle.sh: cannot read the policy $policy_file" >&2; exit 1; }
case "$secret_id_ttl" in
  *[!0-9smhd]*|'') echo "vault-approle.sh: bad --secret-id-ttl $secret_id_ttl (want e.g. 720h, 30d or 0)" >&2; exit 2 ;;
esac
case "$bind_cidrs" in
  '') ;;
  *[!0-9a-fA-F.:/,]*|,*|*,|*,,*) echo "vault-approle.sh: bad --bind-cidrs $bind_cidrs (want e.g. 10.1.2.3/32,fd00::1/128)" >&2; exit 2 ;;
esac
case "$wrap_ttl" in
  '') ;;
  *[!0-9smh]*|0|[smh]*) echo "vault-approle.sh: bad --wrap-ttl $wrap_ttl (want e.g. 10m)" >&2; exit 2 ;;
esac

umask 077
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The token goes to curl in a header file, not on its command line, where
# other local users could read it.
{
  printf 'X-Vault-Token: %s\n' "$VAULT_TOKEN"
  printf 'X-Vault-Request: true\n'
  if [ -n "${VAULT_NAMESPACE:-}" ]; then printf 'X-Vault-Namespace: %s\n' "$VAULT_NAMESPACE"; fi
} >"$tmp/headers"
curl_opts=(-sS --max-time 30 -H "@$tmp/headers")
if [ -n "${VAULT_CACERT:-}" ]; then curl_opts+=(--cacert "$VAULT_CACERT"); fi
if [ -n "${VAULT_CAPATH:-}" ]; then curl_opts+=(--capath "$VAULT_CAPATH"); fi
if [ -n "${VAULT_CLIENT_CERT:-}" ]; then curl_opts+=(--cert "$VAULT_CLIENT_CERT"); fi
if [ -n "${VAULT_CLIENT_KEY:-}" ]; then curl_opts+=(--key "$VAULT_CLIENT_KEY"); fi
case "${VAULT_SKIP_VERIFY:-}" in 1|true|TRUE|True) curl_opts+=(-k) ;; esac
addr=${VAULT_ADDR%/}

# api METHOD PATH [JSON [HEADER]]: calls the Vault API; the response body
# is left in $tmp/out. Fails, printing Vault's errors, unless the status is
# 2xx.
api() {
  local method=$1 path=$2 body=${3:-} header=${4:-} code
  local opts=("${curl_opts[@]}" -X "$method" -o "$tmp/out" -w '%{http_code}')
  if [ -n "$header" ]; then
    opts+=(-H "$header")
  fi
  if [ -n "$body" ]; then
    opts+=(-H 'Content-Type: application/json' --data-binary @-)
  fi
  if ! code=$(printf '%s' "$body" | curl "${opts[@]}" "$addr/v1/$path"); then
    echo "vault-approle.sh: $method $path: cannot reach Vault at $addr" >&2
    return 1
  fi
  case "$code" in
    2??) return 0 ;;
  esac
  echo "vault-approle.sh: $method $path: HTTP $code: $(errors <"$tmp/out")" >&2
  return 1
}

# errors: Vault's error strings from an error response on stdin.
errors() {
  tr -d '\n' | sed -n 's/.*"errors"[[:space:]]*:[[:space:]]*\[\(.*\)\].*/\1/p'
}

# field NAME: the string value of "NAME" in the JSON on stdin (UUIDs and
# such: no escapes inside).
field() {
  tr -d '\n' | sed -n "s/.*\"$1\"[[:space:]]*:[[:space:]]*\"\([^\"]*\)\".*/\1/p"
}

# json_string: stdin as a JSON string literal.
json_string() {
  sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/\t/\\t/g' -e 's/\r//g' |
    awk 'BEGIN { printf "\"" } { printf "%s%s", sep, $0; sep = "\\n" } END { printf "\"" }'
}

# 1. AppRole, enabled once.
api GET sys/auth
if grep -q "\"$mount/\"" "$tmp/out"; then
  echo "approle auth already enabled at $mount/" >&2
else
  api POST "sys/auth/$mount" '{"type":"approle","description":"AppRole login (coily)"}'
  echo "enabled approle auth at $mount/" >&2
fi

# 2. The policy.
api PUT "sys/policies/acl/$policy" "{\"policy\":$(json_string <"$policy_file")}"
echo "wrote policy $policy from $policy_file" >&2

# 3. The role.
bound=
if [ -n "$bind_cidrs" ]; then
  list="\"${bind_cidrs//,/\",\"}\""
  bound=",\"secret_id_bound_cidrs\":[$list],\"token_bound_cidrs\":[$list]"
fi
api POST "auth/$mount/role/$role" "{\"token_policies\":[\"$policy\"],\"token_ttl\":\"1h\",\"token_max_ttl\":\"24h\",\"secret_id_ttl\":\"$secret_id_ttl\"$bound}"
echo "wrote role $role (token_ttl 1h, token_max_ttl 24h, secret_id_ttl $secret_id_ttl${bind_cidrs:+, bound to $bind_cidrs})" >&2

# 4. The role id, printed.
api GET "auth/$mount/role/$role/role-id"
role_id=$(field role_id <"$tmp/out")
[ -n "$role_id" ] || { echo "vault-approle.sh: no role_id in Vault's answer" >&2; exit 1; }

# 5. A new secret id (or the token that wraps it), to the file only.
if [ -n "$wrap_ttl" ]; then
  api POST "auth/$mount/role/$role/secret-id" '{}' "X-Vault-Wrap-TTL: $wrap_ttl"
  # The answer's only "token" is wrap_info's.
  secret_id=$(field token <"$tmp/out")
  what="a response-wrapped secret id (a wrapping token, valid $wrap_ttl; start coily with --vault-wrapped-secret-id-file)"
else
  api POST "auth/$mount/role/$role/secret-id" '{}'
  secret_id=$(field secret_id <"$tmp/out")
  what="a new secret id"
fi
rm -f "$tmp/out"
[ -n "$secret_id" ] || { echo "vault-approle.sh: no secret id in Vault's answer" >&2; exit 1; }
dir=$(dirname "$secret_id_file")
new=$(mktemp "$dir/.coily-secret-id.XXXXXX")
printf '%s\n' "$secret_id" >"$new"
chmod 600 "$new"
mv -f "$new" "$secret_id_file"
unset secret_id
echo "wrote $what to $secret_id_file (mode 0600)" >&2

printf '%s\n' "$role_id"

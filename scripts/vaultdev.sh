#!/usr/bin/env bash
# Builds bin/vaultdev, the Vault dev server the vault tests start (see
# internal/vaulttest), from the nested module integration/vault: the real
# Vault core serving its HTTP API on loopback. The Vault server module is
# large (a cold build takes several minutes and GBs of module and build
# caches) and BUSL-licensed, so it stays out of coily's own module.
# Skips the build when bin/vaultdev is newer than integration/vault's
# go.mod, go.sum and command sources.
set -euo pipefail
cd "$(dirname "$0")/.."
out=bin/vaultdev
src=integration/vault
if [ -x "$out" ] && [ -z "$(find "$src/go.mod" "$src/go.sum" "$src/cmd" -newer "$out" -print -quit)" ]; then
  echo "vaultdev: $out is up to date"
  exit 0
fi
mkdir -p bin
start=$(date +%s)
(cd "$src" && go build -o ../../bin/vaultdev ./cmd/vaultdev)
echo "vaultdev: built $out in $(($(date +%s) - start))s"

#!/usr/bin/env bash
# Installs the npm programs the tests run into bin/npm-tools: verdaccio,
# the npm registry that internal/standin.NpmRegistry starts. Versions are
# pinned by scripts/npm-tools/package.json and its package-lock.json
# (integrity hashes for every package). verdaccio 6.5.2 is the newest 6.x
# that runs on Node 18 (Debian 12's nodejs); its verdaccio-audit asks for
# node-fetch@cjs, a dist-tag the registry mirror may lack, hence the
# override. Skips the install when bin/npm-tools already holds this lock.
set -euo pipefail
cd "$(dirname "$0")/.."
src=scripts/npm-tools
out=bin/npm-tools
stamp="$out/.installed-lock.json"
if [ -x "$out/node_modules/.bin/verdaccio" ] && cmp -s "$src/package-lock.json" "$stamp"; then
  echo "npm-tools: $out is up to date"
  exit 0
fi
command -v npm >/dev/null || { echo "npm-tools: npm is missing" >&2; exit 1; }
start=$(date +%s)
rm -rf "$out"
mkdir -p "$out"
cp "$src/package.json" "$src/package-lock.json" "$out/"
(cd "$out" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error)
cp "$src/package-lock.json" "$stamp"
echo "npm-tools: installed verdaccio $("$out/node_modules/.bin/verdaccio" --version 2>/dev/null) in $(($(date +%s) - start))s"

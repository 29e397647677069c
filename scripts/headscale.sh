#!/usr/bin/env bash
# Builds bin/headscale, the real headscale control server the headscale
# tests start (see internal/headscaletest), from its Go module at a pinned
# version. `go install …@version` is refused by the module proxy here (its
# version list answers 403), but `go mod download` of the exact version
# works: the build runs in a writable copy of the downloaded module, with
# headscale's own go.mod and go.sum. A cold build takes several minutes on
# two cores; the binary is cached: the build is skipped when
# bin/headscale.version names the pinned version and bin/headscale exists.
set -euo pipefail
cd "$(dirname "$0")/.."
version=v0.29.3 # grants with app capabilities arrived in v0.29
out=bin/headscale
stamp=bin/headscale.version
if [ -x "$out" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$version" ]; then
  echo "headscale: $out is $version"
  exit 0
fi
mkdir -p bin
start=$(date +%s)
dir=$(go mod download -json "github.com/juanfont/headscale@$version" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[ -d "$dir" ] || { echo "headscale: go mod download gave no module directory" >&2; exit 1; }
src=$(mktemp -d)
trap 'chmod -R u+w "$src" && rm -rf "$src"' EXIT
cp -r "$dir/." "$src"
chmod -R u+w "$src" # the module cache is read-only
(cd "$src" && CGO_ENABLED=0 go build -trimpath -o "$OLDPWD/$out.tmp" ./cmd/headscale)
mv "$out.tmp" "$out"
echo "$version" >"$stamp"
echo "headscale: built $out ($version) in $(($(date +%s) - start))s"

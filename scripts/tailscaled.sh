#!/usr/bin/env bash
# Builds bin/tailscaled, Tailscale's daemon, and bin/tailscale, its CLI, at
# the tailscale.com version coily's go.mod pins, for the tests through an
# OS tailscaled: the lean client through it
# (TestHeadscaleLeanClientThroughTailscaled), `tailscale ssh HOST coily
# lockout` (TestHeadscaleTailscaleSSHLockout) and the phone's client
# (TestHeadscalePhoneClient). Both are built from coily's own module graph,
# so they share the build cache with each other and with coily's tsnet:
# the daemon's packages are those tsnet links, plus a few. The CLI needs a
# few modules coily does not (its flag parser, shell quoting, …): their
# requirements and checksums go into a copy of go.mod (-modfile), never
# into coily's own. A couple of minutes cold on two cores for the daemon,
# about a minute more for the CLI. Skips the build while
# bin/tailscaled.version names that version.
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(go list -m -f '{{.Version}}' tailscale.com)
stamp=bin/tailscaled.version
if [ -x bin/tailscaled ] && [ -x bin/tailscale ] && [ "$(cat "$stamp" 2>/dev/null)" = "$version" ]; then
  echo "tailscaled: bin/tailscaled and bin/tailscale are $version"
  exit 0
fi
mkdir -p bin
start=$(date +%s)
go build -o bin/tailscaled.tmp tailscale.com/cmd/tailscaled
mod=$(mktemp -d)
trap 'rm -rf "$mod"' EXIT
cp go.mod "$mod/go.mod"
cp go.sum "$mod/go.sum"
go get -modfile="$mod/go.mod" "tailscale.com/cmd/tailscale@$version" # adds only what coily's graph lacks
go build -modfile="$mod/go.mod" -o bin/tailscale.tmp tailscale.com/cmd/tailscale
mv bin/tailscaled.tmp bin/tailscaled
mv bin/tailscale.tmp bin/tailscale
echo "$version" >"$stamp"
echo "tailscaled: built bin/tailscaled and bin/tailscale ($version) in $(($(date +%s) - start))s"

#!/usr/bin/env bash
# Builds bin/tailscaled, Tailscale's daemon at the tailscale.com version
# coily's go.mod pins, for the test of the lean client through an OS
# tailscaled (TestHeadscaleLeanClientThroughTailscaled: userspace
# networking, joined to the test's headscale). Built from coily's own
# module graph (the daemon's packages are those tsnet links, plus a few);
# a couple of minutes cold on two cores. Skips the build while
# bin/tailscaled.version names that version.
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(go list -m -f '{{.Version}}' tailscale.com)
out=bin/tailscaled
stamp=bin/tailscaled.version
if [ -x "$out" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$version" ]; then
  echo "tailscaled: $out is $version"
  exit 0
fi
mkdir -p bin
start=$(date +%s)
go build -o "$out.tmp" tailscale.com/cmd/tailscaled
mv "$out.tmp" "$out"
echo "$version" >"$stamp"
echo "tailscaled: built $out ($version) in $(($(date +%s) - start))s"

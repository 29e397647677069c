#!/usr/bin/env bash
# Runs coily's main job on embedded defaults: installs bubblewrap (the
# sandbox) if it is missing, builds bin/coily, and starts `coily dev` with
# its state in ${1:-/tmp/coily-dev}, passing it any further arguments
# (scripts/dev.sh /tmp/coily-dev --reset). NOT FOR PRODUCTION (see its banner).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v bwrap >/dev/null; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends bubblewrap
fi
go build -tags coilydev -o bin/coily ./cmd/coily # the development build: it has `coily dev`
exec bin/coily dev --state-dir "${1:-/tmp/coily-dev}" "${@:2}"

#!/usr/bin/env bash
# The whole test suite: installs what the tests need on a fresh Debian
# machine (with Go), then checks formatting, vet, staticcheck, buf lint,
# generated code, the macOS build, runs every test with the race detector,
# smoke-runs every fuzz target and benchmark. Under CI=true a skipped test
# fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$(pwd)/bin:$PATH"

step() { printf '\n== %s\n' "$*"; }

step "install test components"
need_apt=()
command -v gcc >/dev/null || need_apt+=(gcc libc6-dev) # the race detector needs cgo
getent passwd nobody >/dev/null || { echo "user nobody is missing" >&2; exit 1; }
if [ ${#need_apt[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
fi
scripts/tools.sh

step "gofmt"
unformatted=$(git ls-files '*.go' | grep -v '\.pb\.go$' | xargs gofmt -l)
if [ -n "$unformatted" ]; then echo "gofmt would change:"; echo "$unformatted"; exit 1; fi

step "go vet (linux, darwin)"
go vet ./...
GOOS=darwin go vet ./...
GOOS=darwin go build ./...

step "staticcheck"
staticcheck ./...

step "buf lint, generated code up to date"
buf lint
buf generate
if [ -n "$(git status --porcelain -- proto)" ]; then
  echo "buf generate changed the tree; commit the regenerated code:"; git status --porcelain -- proto; git diff --stat -- proto; exit 1
fi

step "go test -race"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
go test -race -count=1 -v ./... >"$log" 2>&1
status=$?
set -e
grep -v -E '^(=== (RUN|PAUSE|CONT|NAME)|\s*--- PASS)' "$log" || true
if [ "${CI:-}" = "true" ] && grep -E -- '--- SKIP' "$log"; then
  echo "tests were skipped under CI=true: every component must be installed" >&2
  exit 1
fi
[ $status -eq 0 ] || exit $status

step "fuzz targets (smoke, ${FUZZTIME:=5s} each)"
for pkg in $(go list ./...); do
  for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
    go test -run='^$' -fuzz="^${target}\$" -fuzztime="$FUZZTIME" "$pkg" >/dev/null
    echo "ok  $pkg $target"
  done
done

step "benchmarks (smoke, one iteration)"
go test -run='^$' -bench=. -benchtime=1x ./... >/dev/null
echo "benchmarks ran"

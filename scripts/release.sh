#!/usr/bin/env bash
# Builds a release into dist/ (or -o DIR): the production build of coily
# (no `coily dev`) and the lean coily-client for each platform, archives,
# Debian packages, and SHA256SUMS. Run it on Linux with GNU tar, from a
# clean checkout of the commit to release.
#
#   scripts/release.sh                         # every platform, version from git describe
#   scripts/release.sh -v 1.2.0 -o /tmp/rel linux/amd64 android/arm64
#
# Platforms: linux/amd64 and linux/arm64 (coily, coily-client, an archive
# and a .deb each, both with the AppArmor profile), darwin/arm64 (coily, coily-client and the bridge's
# launchd plist), android/arm64 (coily-client and the Termux:Widget
# scripts, for a phone).
#
# Reproducible: CGO_ENABLED=0, -trimpath, no build id, the version from
# the argument or `git describe`, every timestamp in the archives and
# packages taken from the commit (SOURCE_DATE_EPOCH), owners root, entries
# sorted, gzip without a name or time. The same commit and Go toolchain
# (go.mod's) give the same bytes; compare with SHA256SUMS. BUILDINFO
# records the version, the commit, its time and the Go toolchain used.
set -euo pipefail
# Every file and directory made here is readable by all, whatever the
# caller's umask (the archives record the modes).
umask 022
cd "$(dirname "$0")/.."
root=$(pwd)

usage() { echo "usage: scripts/release.sh [-v VERSION] [-o DIR] [PLATFORM...]" >&2; exit 2; }
version="" out="$root/dist"
while getopts "v:o:h" opt; do
  case $opt in
    v) version=$OPTARG ;;
    o) out=$OPTARG ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
all=(linux/amd64 linux/arm64 darwin/arm64 android/arm64)
platforms=("$@")
[ ${#platforms[@]} -gt 0 ] || platforms=("${all[@]}")
for p in "${platforms[@]}"; do
  case " ${all[*]} " in *" $p "*) ;; *) echo "release: unknown platform $p (known: ${all[*]})" >&2; exit 2 ;; esac
done

if [ -z "$version" ]; then
  # v1.2.0, v1.2.0-3-gabcdef123456, or 0.0.0-gabcdef123456 before the first tag; -dirty when the tree is.
  version=$(git describe --tags --match 'v[0-9]*' --abbrev=12 --dirty 2>/dev/null ||
    echo "0.0.0-g$(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD || echo -dirty)")
fi
version=${version#v}
case $version in
  [0-9]*) ;;
  *) echo "release: version must start with a digit: $version" >&2; exit 2 ;;
esac
case $version in
  *[!A-Za-z0-9.+~-]*) echo "release: version may hold letters, digits and . + ~ - only: $version" >&2; exit 2 ;;
esac
# Debian's version: a pre-release (1.2.0-rc1) sorts before its release
# with ~; anything else after a hyphen (the commits since a tag, -dirty)
# sorts after it with +.
debversion=$(printf '%s' "$version" | sed -E 's/^([0-9.]+)-((rc|alpha|beta)[0-9.]*)/\1~\2/; s/-/+/g')

SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
export SOURCE_DATE_EPOCH
export CGO_ENABLED=0 GOFLAGS=-mod=readonly
commit=$(git rev-parse HEAD)
# Every binary says this version and commit (package version), as BUILDINFO
# does: -trimpath and a tree without .git leave Go's own VCS stamp out.
ldflags="-s -w -buildid= -X coily.dev/coily/version.version=$version -X coily.dev/coily/version.commit=$commit"

mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
made=() # the files of this release, for SHA256SUMS
# The toolchain go.mod selects (GOTOOLCHAIN may fetch it): the one that builds.
goversion=$(go env GOVERSION)
# nfpm, pinned by tools/nfpm/go.mod (as scripts/tools.sh builds it).
(cd tools/nfpm && GOBIN="$root/bin" go install tool)

build() { # GOOS GOARCH PACKAGE OUTPUT
  echo "release: build $4 ($1/$2)"
  GOOS=$1 GOARCH=$2 go build -trimpath -ldflags "$ldflags" -o "$4" "$3"
}

archive() { # DIR (its name is the archive's), written to $out/NAME.tar.gz
  local name
  name=$(basename "$1")
  tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
    --format=gnu -C "$(dirname "$1")" -cf - "$name" | gzip -n -9 >"$out/$name.tar.gz"
  made+=("$name.tar.gz")
  echo "release: $out/$name.tar.gz"
}

for p in "${platforms[@]}"; do
  goos=${p%/*} goarch=${p#*/}
  d="$work/$goos-$goarch"
  mkdir -p "$d"
  case $goos in
    linux)
      a="$d/coily_${version}_${goos}_${goarch}"
      mkdir -p "$a"
      build "$goos" "$goarch" ./cmd/coily "$a/coily"
      build "$goos" "$goarch" ./cmd/coily-client "$a/coily-client"
      build "$goos" "$goarch" ./cmd/coily-exec "$a/coily-exec"
      build "$goos" "$goarch" ./cmd/git-remote-coily "$a/git-remote-coily"
      install -m 0644 deploy/coily.service deploy/policy.yaml deploy/coily.env README.md "$a/"
      install -D -m 0644 deploy/apparmor/coily "$a/apparmor/coily"
      archive "$a"
      # The package's unit starts the packaged binary.
      sed -e 's|/usr/local/bin/coily|/usr/bin/coily|g' \
        -e '1i # Installed by the coily package: change it with `systemctl edit coily`, not here.' \
        deploy/coily.service >"$d/coily.service"
      deb="coily_${debversion}_${goarch}.deb"
      COILY_DEB_MAINTAINER=${COILY_DEB_MAINTAINER:-coily maintainers <coily@invalid>} COILY_DEB_VERSION=$debversion COILY_DEB_ARCH=$goarch COILY_BUILD=$a COILY_UNIT=$d/coily.service \
        "$root/bin/nfpm" package --config deploy/nfpm.yaml --packager deb --target "$out/$deb" >/dev/null
      made+=("$deb")
      echo "release: $out/$deb"
      ;;
    darwin)
      a="$d/coily_${version}_${goos}_${goarch}"
      mkdir -p "$a"
      build "$goos" "$goarch" ./cmd/coily "$a/coily"
      build "$goos" "$goarch" ./cmd/coily-client "$a/coily-client"
      build "$goos" "$goarch" ./cmd/coily-exec "$a/coily-exec"
      build "$goos" "$goarch" ./cmd/git-remote-coily "$a/git-remote-coily"
      install -m 0644 deploy/coily-bridge.plist README.md "$a/"
      archive "$a"
      ;;
    android)
      a="$d/coily-client_${version}_${goos}_${goarch}"
      mkdir -p "$a/termux"
      build "$goos" "$goarch" ./cmd/coily-client "$a/coily-client"
      install -m 0755 deploy/termux/coily-lockout deploy/termux/coily-pause deploy/termux/coily-console "$a/termux/"
      install -m 0644 deploy/termux/phone.env docs/phone.md "$a/termux/"
      archive "$a"
      ;;
  esac
done

# What built this release: with the same commit and Go, the same bytes.
{
  echo "version: $version"
  echo "commit: $commit"
  echo "source_date_epoch: $SOURCE_DATE_EPOCH"
  echo "go: $goversion"
  echo "platforms: ${platforms[*]}"
} >"$out/BUILDINFO"
made+=("BUILDINFO")
echo "release: $out/BUILDINFO (built with $goversion)"

# One line per file of this release, sorted: `sha256sum -c SHA256SUMS`
# checks them (--ignore-missing where only some were downloaded).
(cd "$out" && printf '%s\n' "${made[@]}" | LC_ALL=C sort | xargs sha256sum -- >SHA256SUMS)
echo "release: $out/SHA256SUMS"
cat "$out/SHA256SUMS"

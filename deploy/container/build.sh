#!/usr/bin/env bash
# build.sh ROOT COILY TAG: builds the coily image TAG with podman from a
# Debian root file system ROOT (debootstrap --variant=minbase
# --include=bubblewrap,git,ca-certificates; it is not changed) and the
# release binary COILY (scripts/release.sh's linux build). Reproducible:
# every time in the image is SOURCE_DATE_EPOCH (default: the commit's), the
# root's tarball has sorted entries, numeric owners and no access times, so
# the same ROOT and COILY give the same image digest. Run as root.
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: build.sh ROOT COILY TAG" >&2; exit 2; }
root=$1 coily=$2 tag=$3
here=$(cd "$(dirname "$0")" && pwd)
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$here" log -1 --format=%ct)}
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
umask 022
# The root, less what only apt needs again, then what the image adds:
# the unprivileged user the server runs as (and its sandboxes: coily serve
# not being root, every command runs as its uid) with its state directory,
# the default policy and the binary.
opts=(--sort=name --mtime="@$SOURCE_DATE_EPOCH" --clamp-mtime --numeric-owner
  --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime)
tar -C "$root" "${opts[@]}" --exclude=./etc/passwd --exclude=./etc/group --exclude=./usr/bin/coily \
  --exclude=./usr/bin/coily-health --exclude=./etc/coily --exclude=./var/lib/coily \
  --exclude=./var/cache/apt/archives/*.deb --exclude=./var/lib/apt/lists/* \
  --exclude=./proc/* --exclude=./sys/* --exclude=./dev/* --exclude=./run/* --exclude=./tmp/* \
  -cf "$ctx/rootfs.tar" .
add="$ctx/add"
mkdir -p "$add/etc/coily" "$add/usr/bin" "$add/var/lib"
{ grep -v '^coily:' "$root/etc/passwd"; echo 'coily:x:10001:10001:coily:/var/lib/coily:/usr/sbin/nologin'; } >"$add/etc/passwd"
{ grep -v '^coily:' "$root/etc/group"; echo 'coily:x:10001:'; } >"$add/etc/group"
cp "$here/../../examples/local.yaml" "$add/etc/coily/policy.yaml"
install -m 0755 "$coily" "$add/usr/bin/coily"
install -m 0755 "$here/coily-health" "$add/usr/bin/coily-health"
mkdir -m 0700 "$add/var/lib/coily"
tar -C "$add" "${opts[@]}" --owner=0 --group=0 -rf "$ctx/rootfs.tar" ./etc/passwd ./etc/group ./etc/coily ./usr/bin/coily ./usr/bin/coily-health
tar -C "$add" "${opts[@]}" --owner=10001 --group=10001 -rf "$ctx/rootfs.tar" ./var/lib/coily
touch -d "@$SOURCE_DATE_EPOCH" "$ctx/rootfs.tar"
podman build --quiet --layers=false --format oci --timestamp "$SOURCE_DATE_EPOCH" --pull=never \
  -t "$tag" -f "$here/Containerfile" "$ctx" >/dev/null
podman image inspect --format '{{.Id}} {{.Digest}}' "$tag"

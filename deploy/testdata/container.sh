#!/bin/sh
# container.sh ROOT CMD...: runs CMD with ROOT as its root file system, the
# way a container runtime would, for the package tests. Run it as root in a
# mount namespace of its own (unshare --mount), which takes every mount
# below with it when CMD ends. ROOT gets a fresh /proc, /tmp and /run, then
# becomes / by pivot_root (not chroot: the kernel refuses user namespaces,
# and so bubblewrap, to a chrooted process), and the host's tree is
# detached. Every step execs the next, so CMD keeps this script's PID.
set -eu
root=$1
shift
mount --make-rprivate /
mount --bind "$root" "$root"
mount -t proc proc "$root/proc"
mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
mount -t tmpfs -o mode=0755 tmpfs "$root/run"
mkdir -p "$root/.oldroot"
cd "$root"
pivot_root . .oldroot
exec chroot . /bin/sh -c 'umount -l /.oldroot && rmdir /.oldroot && exec "$@"' sh "$@"

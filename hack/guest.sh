#!/usr/bin/env bash
# Builds the cgroup v2 test guest into DIR (hack/tools.sh calls it as the tool "guest"):
#
#   DIR/guest-vmlinuz, DIR/guest-initrd.img   Debian's kernel and the initramfs it makes
#   DIR/guest-root.img                        an ext4 image of a Debian root filesystem
#
# The root filesystem is made with debootstrap from Debian's archive, with the kernel, the
# programs the node tier runs beside its own binaries (iptables, CNI plugins, static
# busybox, libseccomp for runc) and a small init (/sbin/brewlet-guest-init) that mounts the
# unified cgroup hierarchy and the directories the host shares over 9p, then runs the job the
# host put in one of them (test/cgroupv2). Nothing of the machine is changed: debootstrap runs
# in a mount namespace of its own, into a private directory, and the image is written with
# mkfs.ext4 -d (no loop device, no mount).
#
# Usage: hack/guest.sh DIR
set -euo pipefail

out=${1:?usage: hack/guest.sh DIR}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"
mirror=${BREWLET_DEBIAN_MIRROR:-http://deb.debian.org/debian}
packages=linux-image-amd64,kmod,iproute2,iptables,libseccomp2,busybox-static,containernetworking-plugins,e2fsprogs,util-linux,procps,ca-certificates

work=$(mktemp -d "${TMPDIR:-/tmp}/brewlet-guest.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/root

# debootstrap mounts /proc and /sys inside the target while packages configure: a mount
# namespace of its own keeps every such mount away from the machine, also if it fails.
unshare --mount --propagation private \
  debootstrap --variant=minbase --include="$packages" "$GUEST_SUITE" "$root" "$mirror" \
  > "$work/debootstrap.log" 2>&1 || { tail -n 40 "$work/debootstrap.log" >&2; exit 1; }

kernel=$(find "$root/boot" -maxdepth 1 -name 'vmlinuz-*' | sort | tail -n 1)
initrd=$(find "$root/boot" -maxdepth 1 -name 'initrd.img-*' | sort | tail -n 1)
[[ -n $kernel && -n $initrd ]] || { echo "guest: no kernel or initramfs in $root/boot" >&2; exit 1; }

cat > "$root/sbin/brewlet-guest-init" <<'EOF'
#!/bin/sh
# The guest's init: the unified cgroup hierarchy only, the host's shared directories
# (brewlet.share=TAG:PATH,... on the kernel command line) at their host paths, then the job.
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
# The initramfs has moved /proc, /sys and /dev over already.
mountpoint -q /proc || mount -t proc proc /proc
mountpoint -q /sys || mount -t sysfs sysfs /sys
mountpoint -q /dev || mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm && mount -t devpts devpts /dev/pts && mount -t tmpfs tmpfs /dev/shm
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t tmpfs -o mode=755 tmpfs /run
mount -t tmpfs -o mode=1777 tmpfs /tmp
hostname brewlet-guest
ip link set lo up
# No udev: load what a node's udev or systemd would have loaded by the time pods start (a
# loop device's control node appears only with its module).
modprobe -q loop
modprobe -q overlay
for arg in $(cat /proc/cmdline); do
  case $arg in
    brewlet.share=*)
      for share in $(echo "${arg#brewlet.share=}" | tr ',' ' '); do
        mkdir -p "${share#*:}"
        mount -t 9p -o trans=virtio,version=9p2000.L,msize=1048576,cache=loose "${share%%:*}" "${share#*:}"
      done ;;
    brewlet.job=*) job=${arg#brewlet.job=} ;;
  esac
done
status=1
if [ -x "$job" ]; then "$job"; status=$?; else echo "brewlet-guest: no job $job"; fi
echo "brewlet-guest: job exited $status"
sync
echo o > /proc/sysrq-trigger
sleep 60
EOF
chmod 0755 "$root/sbin/brewlet-guest-init"

cp "$kernel" "$out/guest-vmlinuz"
cp "$initrd" "$out/guest-initrd.img"
# Boot files are not needed inside; the image stays sparse.
rm -rf "$root/boot"/* "$root/var/cache/apt/archives"/*.deb
mkfs.ext4 -q -F -L brewlet-guest -d "$root" "$out/guest-root.img" 4G
echo "guest: $(basename "$kernel"), root image $(du -h "$out/guest-root.img" | cut -f1) used of 4G" >&2

#!/usr/bin/env bash
# Builds Brewlet's local runtime (golden) images from Debian packages and pushes them with
# `brewlet runtime build` to a registry. No image is pulled from anywhere.
#
#   hack/runtimes.sh REGISTRY [busybox|python|all]
#
# busybox  REGISTRY/runtimes/busybox:1   static busybox, account app 10001:10001, PATH=/bin
# python   REGISTRY/runtimes/python:1 and :2
#          CPython 3.11 from Debian's packages with account app 10001:10001. The two
#          generations share their base layer and differ in one small layer, for rotation
#          tests.
# The last lines printed are NAME=REF@sha256:... for each image.
set -euo pipefail

reg=${1:?usage: hack/runtimes.sh REGISTRY [busybox|python|all]}
what=${2:-all}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
CACHE=${BREWLET_TOOLS_CACHE:-$HOME/.cache/brewlet-tools}
work=$(mktemp -d "${TMPDIR:-/tmp}/brewlet-runtimes.XXXXXX")
trap 'rm -rf "$work"' EXIT
log() { printf '[runtimes %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

brewlet=$work/brewlet
(cd "$root" && go build -o "$brewlet" ./cmd/brewlet)

accounts() { # ROOT: the runtime's account files and home
  mkdir -p "$1/etc" "$1/home/app" "$1/tmp"
  chmod 1777 "$1/tmp"
  printf 'root:x:0:0:root:/root:/usr/sbin/nologin\napp:x:10001:10001:Brewlet application:/home/app:/usr/sbin/nologin\n' > "$1/etc/passwd"
  printf 'root:x:0:\napp:x:10001:\n' > "$1/etc/group"
  chown 10001:10001 "$1/home/app"
}

build_busybox() {
  local r=$work/busybox a
  mkdir -p "$r/bin"
  cp /bin/busybox "$r/bin/busybox"
  for a in $(/bin/busybox --list); do [[ $a == busybox ]] || ln -s busybox "$r/bin/$a"; done
  accounts "$r"
  log "busybox runtime"
  local ref
  ref=$("$brewlet" runtime build "$reg/runtimes/busybox:1" --rootfs "$r" --uid 10001 --gid 10001 --env PATH=/bin | tail -1)
  echo "busybox=$ref"
}

# Debian packages for a minimal CPython, unpacked (never installed, no maintainer scripts).
PY_PACKAGES="libc6 libpython3.11-minimal python3.11-minimal libexpat1 zlib1g"

build_python() {
  local debs=$CACHE/debs r=$work/python-base p f
  mkdir -p "$debs" "$r"
  log "downloading $PY_PACKAGES"
  (cd "$debs" && apt-get download -qq $PY_PACKAGES >/dev/null 2>&1) || {
    apt-get update -qq >/dev/null && (cd "$debs" && apt-get download -qq $PY_PACKAGES >/dev/null); }
  for p in $PY_PACKAGES; do
    f=$(ls -t "$debs/${p}"_*.deb | head -1)
    dpkg-deb -x "$f" "$r"
  done
  mkdir -p "$r/usr/local/bin"
  [[ -e $r/bin ]] || ln -s usr/bin "$r/bin" # merged /usr, as on Debian
  ln -sf python3.11 "$r/usr/bin/python3"
  ln -sf python3.11 "$r/usr/bin/python"
  rm -rf "$r/usr/share/doc" "$r/usr/share/man" "$r/usr/share/lintian"
  # applications run without privileges: no setuid/setgid files in a runtime
  find "$r" -perm /6000 -type f -exec chmod ug-s {} +
  accounts "$r"
  local g ref
  for g in 1 2; do
    mkdir -p "$work/python-gen$g/etc"
    printf 'BREWLET_RUNTIME_GENERATION=%s\n' "$g" > "$work/python-gen$g/etc/brewlet-runtime-release"
    log "python runtime generation $g"
    ref=$("$brewlet" runtime build "$reg/runtimes/python:$g" --rootfs "$r" --rootfs "$work/python-gen$g" \
      --uid 10001 --gid 10001 --env PATH=/usr/local/bin:/usr/bin:/bin --env LANG=C.UTF-8 | tail -1)
    echo "python$g=$ref"
  done
}

case $what in
  busybox) build_busybox ;;
  python) build_python ;;
  all) build_busybox; build_python ;;
  *) echo "unknown runtime $what" >&2; exit 2 ;;
esac

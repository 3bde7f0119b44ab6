#!/usr/bin/env bash
# Builds Brewlet's local runtime (golden) images from Debian packages and pushes them with
# `brewlet runtime build` to a registry. No image is pulled from anywhere, no package is
# installed: each .deb is fetched with `apt-get download` (cached in
# $BREWLET_TOOLS_CACHE/debs) and unpacked with `dpkg-deb -x`; no maintainer script runs.
#
#   hack/runtimes.sh REGISTRY [busybox|python|jre|node|static|all]
#
# busybox  busybox=REF                 static busybox, account app 10001:10001, PATH=/bin
# python   python1=REF python2=REF     CPython 3.11 (python3.11-minimal), app 10001:10001
# jre      jre-17-1=REF jre-17-2=REF   OpenJDK 17 headless JRE, app 10001:10001
# node     node-18-1=REF node-18-2=REF Node.js 18, app 10001:10001
# static   static-1=REF static-2=REF   distroless: CA certificates and tzdata only; no shell,
#                                      no PATH, no account files (run as 65532:65532)
#
# Generation 1 of each runtime is the Debian bookworm release version of the runtime's own
# packages, generation 2 the bookworm-security update of the same packages. Versions are
# looked up in the package archive (apt-cache madison) when the script runs and printed.
#
# Each runtime image has three layers, ordered by how often they change:
#   1. base: libc and the libraries the runtime links, at the archive's newest version; the
#      same bytes for both generations, so a rotation reuses it
#   2. the runtime's own packages (one Debian source package: the interpreter and its
#      library), pinned to the generation's version
#   3. Brewlet metadata: account files and /etc/brewlet-runtime-release, which records the
#      generation and the versions of every package in the image
# A security update of the interpreter therefore ships layers 2 and 3 only. The static
# runtime has no base layer (nothing to link): its packages are layer 1, metadata layer 2.
# What maintainer scripts would have done is done here from the unpacked files: symlinks,
# the CA bundle, the JRE's truststore (hack/truststore). docs/runtimes.md explains the choices.
#
# The last lines printed are NAME=REF@sha256:... for each image.
set -euo pipefail

reg=${1:?usage: hack/runtimes.sh REGISTRY [busybox|python|jre|node|static|all]}
what=${2:-all}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
CACHE=${BREWLET_TOOLS_CACHE:-$HOME/.cache/brewlet-tools}
DEBS=$CACHE/debs
work=$(mktemp -d "${TMPDIR:-/tmp}/brewlet-runtimes.XXXXXX")
trap 'rm -rf "$work"' EXIT
log() { printf '[runtimes %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
mkdir -p "$DEBS"

brewlet=$work/brewlet
(cd "$root" && go build -o "$brewlet" ./cmd/brewlet)
# BREWLET_REGISTRY_CA_FILE: a PEM file of the registry's CA (a registry with a CA of its own);
# credentials come from the Docker config (DOCKER_CONFIG).
build_flags=()
if [ -n "${BREWLET_REGISTRY_CA_FILE:-}" ]; then build_flags+=(--ca-file "$BREWLET_REGISTRY_CA_FILE"); fi

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
  ref=$("$brewlet" runtime build "${build_flags[@]}" "$reg/runtimes/busybox:1" --rootfs "$r" --uid 10001 --gid 10001 --env PATH=/bin | tail -1)
  echo "busybox=$ref"
}

# --- Debian packages -------------------------------------------------------------------

updated=
apt_update() { [[ -n $updated ]] || { log "apt-get update"; apt-get update -qq >/dev/null; updated=1; }; }

# suite_version PKG SUITE: PKG's version in a Debian suite ("bookworm" is the release,
# "bookworm-security" the security updates), empty if the suite has none.
suite_version() {
  apt-cache madison "$1" | awk -F'|' -v s=" $2/main " '
    index($3, s) && $3 ~ /debian(-security)?[ ]/ { gsub(/ /, "", $2); print $2; exit }'
}

# deb PKG VERSION: the cached .deb of PKG=VERSION, downloading it on first use.
deb() {
  local f
  f=$(compgen -G "$DEBS/${1}_${2//:/%3a}_*.deb" | head -1 || true)
  if [[ -z $f ]]; then
    # Downloaded in a private directory and renamed into the cache: another build running
    # at the same time never reads a half-written .deb.
    local tmp
    tmp=$(mktemp -d "$DEBS/.download.XXXXXX")
    (cd "$tmp" && apt-get download -qq "$1=$2" >/dev/null 2>&1) ||
      { apt_update; (cd "$tmp" && apt-get download -qq "$1=$2" >/dev/null); } || { rm -rf "$tmp"; return 1; }
    for got in "$tmp"/*.deb; do mv -f "$got" "$DEBS/"; done
    rm -rf "$tmp"
    f=$(compgen -G "$DEBS/${1}_${2//:/%3a}_*.deb" | head -1)
  fi
  echo "$f"
}

# Packages never unpacked, whatever depends on them: they only serve maintainer scripts or
# package management (debconf, perl, dpkg, install-info), tools the runtime does not run
# (python3 is needed by node-gyp, not by node; util-linux by the JRE's packaging; openssl's
# command by ca-certificates' maintainer script), Debian's Java packaging glue (java-common,
# ca-certificates-java: the JRE's truststore is built here instead), and libraries that only
# the JRE's desktop APIs (printing, sound, smart cards, font configuration files) load, each
# of which pulls a tree of desktop packages.
EXCLUDE=" debconf cdebconf perl-base perl dpkg install-info python3 util-linux openssl java-common "
EXCLUDE+="ca-certificates-java libcups2 libasound2 libpcsclite1 fontconfig-config "

# closure ROOTS...: ROOTS (PKG=VERSION, or PKG for the newest Debian version) and everything
# they need at run time, as PKG=VERSION lines, each package once. "Need" is Depends and
# Pre-Depends only (no Recommends/Suggests/Enhances), the first alternative of each group, a
# virtual package replaced by its first provider; EXCLUDE cuts the walk.
closure() {
  local -A deps=() ver=() seen=()
  local queue=() item p v d line
  # One apt-cache call for the whole graph: "PKG DEP DEP ..." per package.
  while read -r line; do
    p=${line%% *}; deps[$p]=${line#"$p"}
  done < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
    --no-replaces --no-enhances "$@" 2>/dev/null | awk '
    function flush() { if (pkg != "") print pkg list }
    /^[^ ]/ { flush(); pkg = $1; list = ""; skip = 0; want = 0; next }
    /^ [ |](Pre)?Depends: / {
      alt = substr($0, 2, 1) == "|"; name = $2
      if (!skip) { if (name ~ /^</) want = 1; else list = list " " name }
      skip = alt; next
    }
    /^    / { if (want) { list = list " " $1; want = 0 }; next }
    { want = 0 }
    END { flush() }')
  # One apt-cache call for the versions: the newest a Debian archive offers (other
  # repositories configured here, e.g. NodeSource, are ignored).
  while read -r p v; do
    [[ -n ${ver[$p]:-} ]] || ver[$p]=$v
  done < <(apt-cache madison $(printf '%s\n' "${!deps[@]}" | grep -v '[<=]') 2>/dev/null | awk -F'|' '
    $3 ~ /deb\.debian\.org/ { gsub(/ /, "", $1); gsub(/ /, "", $2); print $1, $2 }' | sort -k1,1 -k2,2Vr)
  for item in "$@"; do queue+=("$item"); done
  while ((${#queue[@]})); do
    item=${queue[0]}; queue=("${queue[@]:1}")
    p=${item%%=*}
    [[ -n ${seen[$p]:-} || $EXCLUDE == *" $p "* ]] && continue
    if [[ $item == *=* ]]; then v=${item#*=}; else v=${ver[$p]:-}; fi
    [[ -n $v ]] || { echo "no Debian version of $p" >&2; return 1; }
    seen[$p]=1
    echo "$p=$v"
    d=${deps[$item]:-${deps[$p]:-}}
    for d in $d; do [[ -n ${seen[$d]:-} ]] || queue+=("$d"); done
  done
}

# unpack DIR PKG=VERSION...: unpack packages into DIR (merged /usr, as on Debian).
unpack() {
  local dir=$1 pv; shift
  mkdir -p "$dir"
  for pv in "$@"; do dpkg-deb -x "$(deb "${pv%%=*}" "${pv#*=}")" "$dir"; done
  rm -rf "$dir/usr/share/doc" "$dir/usr/share/man" "$dir/usr/share/lintian" "$dir/usr/share/bug"
  # applications run without privileges: no setuid/setgid files in a runtime
  find "$dir" -perm /6000 -type f -exec chmod ug-s {} +
}

merged_usr() { # ROOT: Debian bookworm's merged-/usr links
  local d
  mkdir -p "$1/usr/bin" "$1/usr/sbin" "$1/usr/lib" "$1/usr/lib64"
  for d in bin sbin lib lib64; do [[ -e $1/$d ]] || ln -s "usr/$d" "$1/$d"; done
}

# ca_bundle ROOT: what update-ca-certificates (a maintainer script) would generate from the
# unpacked ca-certificates package: the PEM bundle every TLS library reads, and OpenSSL's
# default locations pointing at it.
ca_bundle() {
  local r=$1 c
  mkdir -p "$r/etc/ssl/certs" "$r/usr/lib/ssl"
  : > "$r/etc/ssl/certs/ca-certificates.crt"
  for c in "$r"/usr/share/ca-certificates/mozilla/*.crt; do
    cat "$c" >> "$r/etc/ssl/certs/ca-certificates.crt"
  done
  ln -sfn /etc/ssl/certs "$r/usr/lib/ssl/certs"
  ln -sf /etc/ssl/certs/ca-certificates.crt "$r/usr/lib/ssl/cert.pem"
}

# pinned PKG... SUITE: PKG=VERSION for each package at its version in SUITE.
pinned() {
  local suite=${*: -1} p v
  for p in "${@:1:$#-1}"; do
    v=$(suite_version "$p" "$suite")
    [[ -n $v ]] || { apt_update; v=$(suite_version "$p" "$suite"); }
    [[ -n $v ]] || { echo "no $suite version of $p" >&2; return 1; }
    echo "$p=$v"
  done
}

# check_pins "PKG..." PKG=VERSION...: stop unless every package got a version.
check_pins() {
  local own=$1; shift
  (($# == $(wc -w <<<"$own"))) || { echo "versions of $own not found: $*" >&2; exit 1; }
}

# release_file DIR GEN NAME PKG=VERSION...: /etc/brewlet-runtime-release.
release_file() {
  local dir=$1 gen=$2 name=$3; shift 3
  mkdir -p "$dir/etc"
  {
    printf 'BREWLET_RUNTIME_GENERATION=%s\n' "$gen"
    printf 'BREWLET_RUNTIME=%s\n' "$name"
    printf '%s\n' "$@" | sort | sed 's/^/DEBIAN_PACKAGE /'
  } > "$dir/etc/brewlet-runtime-release"
}

# build_pair NAME REPO OUT1 OUT2 "RUNTIME PACKAGES" FIXUP BUILD-FLAGS...: the two
# generations of a three-layer runtime. FIXUP ROOT BASE runs on each generation's runtime
# layer (symlinks the packages' maintainer scripts would create).
build_pair() {
  local name=$1 repo=$2 out1=$3 out2=$4 own=$5 fixup=$6; shift 6
  local base=$work/$name-base g suite rt meta ref
  local -a pins deps
  mapfile -t pins < <(pinned $own bookworm)
  check_pins "$own" "${pins[@]}"
  # The base: everything the runtime's packages need except themselves, newest version.
  # (Resolved from generation 1's packages; the security update needs the same libraries,
  # and the base carries their newest versions.)
  mapfile -t deps < <(closure "${pins[@]}" ${EXTRA:-} | grep -v -E "^($(echo $own | tr ' ' '|'))=")
  ((${#deps[@]})) || { echo "$name: no dependencies resolved" >&2; exit 1; }
  log "$name base layer: ${deps[*]}"
  unpack "$base" "${deps[@]}"
  merged_usr "$base"
  if [[ -d $base/usr/share/ca-certificates ]]; then ca_bundle "$base"; fi
  for g in 1 2; do
    suite=bookworm; [[ $g == 2 ]] && suite=bookworm-security
    mapfile -t pins < <(pinned $own $suite)
    check_pins "$own" "${pins[@]}"
    rt=$work/$name-runtime$g meta=$work/$name-meta$g
    unpack "$rt" "${pins[@]}"
    "$fixup" "$rt" "$base"
    accounts "$meta"
    mkdir -p "$meta/usr/local/bin"
    release_file "$meta" "$g" "$name" "${deps[@]}" "${pins[@]}"
    log "$name generation $g ($suite): ${pins[*]}"
    ref=$("$brewlet" runtime build "${build_flags[@]}" "$reg/runtimes/$repo:$g" --rootfs "$base" --rootfs "$rt" --rootfs "$meta" \
      --uid 10001 --gid 10001 "$@" | tail -1)
    if [[ $g == 1 ]]; then echo "$out1=$ref"; else echo "$out2=$ref"; fi
  done
}

# --- CPython 3.11 ----------------------------------------------------------------------

python_fixup() {
  mkdir -p "$1/usr/bin" "$1/usr/local/bin"
  ln -sf python3.11 "$1/usr/bin/python3"
  ln -sf python3.11 "$1/usr/bin/python"
}

build_python() {
  build_pair python-3.11 python python1 python2 "python3.11-minimal libpython3.11-minimal" python_fixup \
    --env PATH=/usr/local/bin:/usr/bin:/bin --env LANG=C.UTF-8
}

# --- Node.js 18 ------------------------------------------------------------------------

node_fixup() { # nodejs reads CA certificates from OpenSSL's default store: the base's bundle
  mkdir -p "$1/usr/local/bin"
}

build_node() {
  EXTRA=ca-certificates build_pair node-18 node node-18-1 node-18-2 "nodejs libnode108" node_fixup \
    --env PATH=/usr/local/bin:/usr/bin:/bin --env LANG=C.UTF-8
}

# --- OpenJDK 17 JRE --------------------------------------------------------------------

JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64

jre_fixup() {
  local r=$1 base=$2
  # What update-alternatives (a maintainer script) would do for `java`: a plain symlink.
  mkdir -p "$r/usr/bin"
  ln -sf "$JAVA_HOME/bin/java" "$r/usr/bin/java"
  ln -sf "$JAVA_HOME/bin/keytool" "$r/usr/bin/keytool"
  # The JRE's truststore normally comes from ca-certificates-java's maintainer script (which
  # runs Java). Build the same JKS store from the base layer's CA bundle, without running
  # anything from the image.
  "$work/truststore" -o "$r/etc/ssl/certs/java/cacerts" "$base/etc/ssl/certs/ca-certificates.crt"
}

build_jre() {
  (cd "$root" && go build -o "$work/truststore" ./hack/truststore)
  # ca-certificates is not a dependency once ca-certificates-java is left out: add it to
  # the base, which is where the truststore's certificates come from.
  EXTRA=ca-certificates build_pair jre-17 jre jre-17-1 jre-17-2 "openjdk-17-jre-headless" jre_fixup \
    --env PATH=/usr/local/bin:/usr/bin:/bin --env LANG=C.UTF-8 --env JAVA_HOME=$JAVA_HOME
}

# --- static (distroless) ---------------------------------------------------------------

build_static() {
  local own="ca-certificates tzdata" g suite r meta ref
  local -a pins
  for g in 1 2; do
    suite=bookworm; [[ $g == 2 ]] && suite=bookworm-security
    mapfile -t pins < <(pinned $own $suite)
    check_pins "$own" "${pins[@]}"
    r=$work/static-pkgs$g meta=$work/static-meta$g
    unpack "$r" "${pins[@]}"
    ca_bundle "$r"
    rm -rf "$r/usr/sbin" "$r/usr/share/ca-certificates" "$r/etc/ca-certificates" "$r/etc/ca-certificates.conf"
    # No account files and no /etc/passwd: the numeric user runs as is (docs/runtimes.md, "What the rules refuse").
    mkdir -p "$meta/tmp"
    chmod 1777 "$meta/tmp"
    release_file "$meta" "$g" static "${pins[@]}"
    log "static generation $g ($suite): ${pins[*]}"
    ref=$("$brewlet" runtime build "${build_flags[@]}" "$reg/runtimes/static:$g" --rootfs "$r" --rootfs "$meta" \
      --uid 65532 --gid 65532 | tail -1)
    echo "static-$g=$ref"
  done
}

case $what in
  busybox) build_busybox ;;
  python) build_python ;;
  jre) build_jre ;;
  node) build_node ;;
  static) build_static ;;
  all) build_busybox; build_python; build_node; build_static; build_jre ;;
  *) echo "unknown runtime $what" >&2; exit 2 ;;
esac

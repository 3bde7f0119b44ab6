#!/usr/bin/env bash
# Builds the /app content of a sample application into OUT, ready for
#   brewlet push REF --layer app=OUT:/app/NAME --entrypoint ... --requires-runtime ID
#
#   examples/build.sh NAME OUT
#
# hello-web     examples/hello-web as is (CPython, runtime python-3.11)
# hello-java    hello.jar, compiled here with javac from Debian's openjdk-17-jdk-headless,
#               unpacked (never installed) into $BREWLET_TOOLS_CACHE (runtime jre-17)
# hello-node    server.js as is (runtime node-18)
# hello-static  hello, a static Go binary (CGO_ENABLED=0) built with the local Go (runtime
#               static)
set -euo pipefail
name=${1:?usage: examples/build.sh NAME OUT}
out=${2:?usage: examples/build.sh NAME OUT}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${BREWLET_TOOLS_CACHE:-$HOME/.cache/brewlet-tools}
mkdir -p "$out"

# jdk: a JDK 17 unpacked from Debian's packages (the newest Debian version), cached.
jdk() {
  local v dir debs=$CACHE/debs p f
  v=$(apt-cache madison openjdk-17-jdk-headless | awk -F'|' '$3 ~ /deb\.debian\.org/ { gsub(/ /, "", $2); print $2 }' | sort -V -r | head -1)
  [[ -n $v ]] || { echo "no Debian openjdk-17-jdk-headless (apt-get update?)" >&2; return 1; }
  dir=$CACHE/jdk/$v
  if [[ ! -x $dir/usr/lib/jvm/java-17-openjdk-amd64/bin/javac ]]; then
    # Two builds may fill the cache at once (parallel test runs): each downloads into and
    # unpacks in a directory of its own, and the first to finish provides the JDK.
    local tmp dl
    mkdir -p "$debs" "$(dirname "$dir")"
    tmp=$(mktemp -d "$dir.tmp.XXXXXX")
    dl=$(mktemp -d "$debs/.dl.XXXXXX")
    for p in openjdk-17-jdk-headless openjdk-17-jre-headless; do
      f=$(compgen -G "$debs/${p}_${v//:/%3a}_*.deb" | head -1 || true)
      if [[ -z $f ]]; then
        (cd "$dl" && apt-get download -qq "$p=$v" >/dev/null)
        f=$(compgen -G "$dl/${p}_${v//:/%3a}_*.deb" | head -1)
        mv -f "$f" "$debs/" && f=$debs/$(basename "$f")
      fi
      dpkg-deb -x "$f" "$tmp"
    done
    rmdir "$dl"
    if [[ ! -x $dir/usr/lib/jvm/java-17-openjdk-amd64/bin/javac ]]; then
      rm -rf "$dir" && mv -T "$tmp" "$dir" 2>/dev/null || rm -rf "$tmp"
    else
      rm -rf "$tmp"
    fi
  fi
  echo "$dir/usr/lib/jvm/java-17-openjdk-amd64"
}

case $name in
  hello-web) cp "$here/hello-web/server.py" "$out/" ;;
  hello-node) cp "$here/hello-node/server.js" "$out/" ;;
  hello-java)
    home=$(jdk)
    classes=$(mktemp -d)
    trap 'rm -rf "$classes"' EXIT
    JAVA_HOME=$home "$home/bin/javac" --release 17 -d "$classes" "$here/hello-java/Hello.java"
    JAVA_HOME=$home "$home/bin/jar" --create --file "$out/hello.jar" --main-class Hello -C "$classes" .
    ;;
  hello-static)
    (cd "$here/hello-static" && CGO_ENABLED=0 go build -trimpath -ldflags=-s -o "$out/hello" .)
    ;;
  *) echo "unknown example $name" >&2; exit 2 ;;
esac
chmod -R a+rX "$out"

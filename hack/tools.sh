#!/usr/bin/env bash
# Builds every external tool the tests and the local cluster need, from the Go module proxy
# and Debian packages only, into a cache outside the repository:
#
#   $BREWLET_TOOLS_CACHE/<tool>/<version>-<go version>/bin/   (default ~/.cache/brewlet-tools)
#   $BREWLET_TOOLS_CACHE/bin/                                  symlinks to the pinned set
#
# Idempotent: a tool whose directory is complete is not rebuilt, so a second run takes
# seconds. Versions live in hack/versions.env.
#
# Usage: hack/tools.sh [all|debs|TOOL...]    hack/tools.sh bin-dir
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"
CACHE=${BREWLET_TOOLS_CACHE:-$HOME/.cache/brewlet-tools}
BIN=$CACHE/bin
GOV=$(go env GOVERSION)
TOOLS=(controller-gen containerd runc registry crictl etcd kubernetes kwok helm prometheus monitoring-crds golangci-lint guest)
# The containerd matrix: one daemon binary per other containerd line, named containerd-<version>.
for v in $CONTAINERD_MATRIX; do TOOLS+=("containerd@$v"); done

log() { printf '[tools %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

debs() {
  local missing=() p
  # shellcheck disable=SC2086
  for p in $DEBIAN_PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  ((${#missing[@]})) || { log "debian packages present"; return 0; }
  log "installing debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# A throwaway module for tools that `go install pkg@version` refuses (replace directives).
tools_module() { # DIR
  rm -rf "$1"; mkdir -p "$1"
  printf 'module brewlet.invalid/tools\n\ngo %s\n' "${GOV#go}" > "$1/go.mod"
}

k8s_ldflags() {
  local v=$KUBERNETES_VERSION minor ld="-s -w" p
  minor=$(echo "$v" | cut -d. -f2)
  # Unstamped builds report v0.0.0-master, which breaks kubectl version and semver checks.
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $p.gitVersion=$v -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
    ld="$ld -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  echo "$ld"
}

build_controller-gen() {
  GOBIN=$1 go install -ldflags="-s -w" "sigs.k8s.io/controller-tools/cmd/controller-gen@$CONTROLLER_TOOLS_VERSION"
}
build_containerd() {
  local m=github.com/containerd/containerd/v2/cmd
  GOBIN=$1 go install -ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
    "$m/containerd@$CONTAINERD_VERSION" "$m/ctr@$CONTAINERD_VERSION" "$m/containerd-shim-runc-v2@$CONTAINERD_VERSION"
}
# The daemon (and its runc shim): the matrix tests its config loader, CRI and shim protocol
# against Brewlet's own shim; runc and ctr come from the pinned set.
build_containerd_matrix() { # DIR VERSION
  local v=$2 m=github.com/containerd/containerd/v2 tags="" d gomod
  # 1.7's btrfs snapshotter needs btrfs headers through cgo; the matrix never uses it.
  [[ $v == v1.* ]] && m=github.com/containerd/containerd tags=no_btrfs
  d=$CACHE/src/containerd-$v
  tools_module "$d"
  # go install refuses a module whose go.mod excludes versions (2.0 does): a throwaway main
  # module with the same excludes resolves the same dependencies.
  gomod=$(cd "$d" && go mod download -json "$m@$v" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  awk '/^exclude \(/{p=1} p{print} /^\)/{p=0} /^exclude [^(]/{print}' "$gomod" >> "$d/go.mod"
  (cd "$d" && go get "$m/cmd/containerd@$v" &&
    go build -tags "$tags" -ldflags="-s -w -X $m/version.Version=$v" -o "$1/containerd-$v" "$m/cmd/containerd")
  # A runc shim of the same line: the pinned one speaks only 2.3's start protocol.
  [[ $v == v1.* ]] || (cd "$d" && go build -ldflags="-s -w" -o "$1/containerd-shim-runc-v2-$v" "$m/cmd/containerd-shim-runc-v2")
}
build_runc() {
  CGO_ENABLED=1 GOBIN=$1 go install -tags seccomp -ldflags="-s -w -X main.version=${RUNC_VERSION#v}" \
    "github.com/opencontainers/runc@$RUNC_VERSION"
}
build_registry() {
  GOBIN=$1 go install -ldflags="-s -w" "github.com/distribution/distribution/v3/cmd/registry@$DISTRIBUTION_VERSION"
}
build_crictl() {
  GOBIN=$1 go install -ldflags="-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=${CRICTL_VERSION#v}" \
    "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"
}
build_etcd() {
  local d=$CACHE/src/etcd
  tools_module "$d"
  (cd "$d" && go get -tool "go.etcd.io/etcd/server/v3@$ETCD_VERSION" &&
    go build -ldflags="-s -w" -o "$1/etcd" go.etcd.io/etcd/server/v3)
}
build_kubernetes() {
  local d=$CACHE/src/kubernetes gomod sv cmds=() c
  tools_module "$d"
  sv=v0.${KUBERNETES_VERSION#v1.}
  gomod=$(cd "$d" && go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  # k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them with local
  # paths; a consumer must replace each with the published version.
  { echo "replace ("
    awk '/^\tk8s.io\/[a-z0-9-]+ v0.0.0$/{print $1}' "$gomod" | while read -r m; do printf '\t%s => %s %s\n' "$m" "$m" "$sv"; done
    echo ")"; } >> "$d/go.mod"
  for c in kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet; do cmds+=("k8s.io/kubernetes/cmd/$c"); done
  (cd "$d" && go get -tool "${cmds[@]/%/@$KUBERNETES_VERSION}" &&
    go build -ldflags="$(k8s_ldflags)" -o "$1/" "${cmds[@]}")
}
build_kwok() {
  GOBIN=$1 go install -ldflags="-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  # kwok refuses to start without Stage objects: ship the module's own fast stages.
  local s f
  s=$(go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')/kustomize/stage
  for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
    pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    echo "---"; cat "$s/$f"
  done > "$1/kwok-stages.yaml"
}
build_helm() {
  GOBIN=$1 go install -ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
}
build_prometheus() {
  # Only Kubernetes service discovery (the tests' and most clusters' way to find targets):
  # the cloud providers' discovery would triple the build. The web UI's assets are not
  # built in; the API the tests use needs none.
  local v=$PROMETHEUS_VERSION rel
  rel=$(echo "${v#v0.}" | sed -E 's/^([0-9])([0-9]+)\./\1.\2./')
  GOBIN=$1 go install -tags remove_all_sd,enable_kubernetes_sd \
    -ldflags="-s -w -X github.com/prometheus/common/version.Version=$rel" \
    "github.com/prometheus/prometheus/cmd/prometheus@$v" "github.com/prometheus/prometheus/cmd/promtool@$v"
}
build_monitoring-crds() { # no build: two CRD manifests out of the module's source
  local d f
  d=$(go mod download -json "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  for f in servicemonitors prometheusrules; do
    cp "$d/example/prometheus-operator-crd/monitoring.coreos.com_$f.yaml" "$1/"
  done
}
build_guest() { # the cgroup v2 guest's kernel and root filesystem (Debian archive, debootstrap)
  "$here/guest.sh" "$1"
}
build_golangci-lint() {
  GOBIN=$1 go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$GOLANGCI_LINT_VERSION"
}

version_of() {
  case $1 in
    controller-gen) echo "$CONTROLLER_TOOLS_VERSION" ;; containerd) echo "$CONTAINERD_VERSION" ;;
    runc) echo "$RUNC_VERSION" ;; registry) echo "$DISTRIBUTION_VERSION" ;; crictl) echo "$CRICTL_VERSION" ;;
    etcd) echo "$ETCD_VERSION" ;; kubernetes) echo "$KUBERNETES_VERSION" ;; kwok) echo "$KWOK_VERSION" ;;
    helm) echo "$HELM_VERSION" ;; prometheus) echo "$PROMETHEUS_VERSION" ;;
    monitoring-crds) echo "$PROMETHEUS_OPERATOR_VERSION" ;; golangci-lint) echo "$GOLANGCI_LINT_VERSION" ;;
    containerd@*) echo "${1#containerd@}" ;;
    guest) echo "$GUEST_VERSION" ;;
    *) echo "unknown tool $1" >&2; return 1 ;;
  esac
}

ensure() { # TOOL INDEX TOTAL
  local t=$1 v dir t0=$SECONDS
  v=$(version_of "$t")
  dir=$CACHE/$t/$v-$GOV
  if [[ ! -f $dir/.complete ]]; then
    log "($2/$3) building $t $v (cold builds take minutes; see hack/versions.env)"
    rm -rf "$dir"; mkdir -p "$dir/bin"
    local build=build_$t
    [[ $t == containerd@* ]] && build=build_containerd_matrix
    if ! "$build" "$dir/bin" "$v"; then log "FAILED to build $t $v"; return 1; fi
    touch "$dir/.complete"
    log "($2/$3) $t $v built in $((SECONDS - t0)) s"
  else
    log "($2/$3) $t $v cached"
  fi
  mkdir -p "$BIN"
  local f
  for f in "$dir"/bin/*; do ln -sfn "$f" "$BIN/$(basename "$f")"; done
}

main() {
  if [[ ${1:-} == bin-dir ]]; then echo "$BIN"; return 0; fi
  local want=("$@") i=0 t0=$SECONDS
  ((${#want[@]})) && [[ ${want[0]} != all ]] || want=(debs "${TOOLS[@]}")
  mkdir -p "$CACHE"
  exec 9>"$CACHE/.lock"
  flock 9 # two runs on one machine build one at a time instead of racing on the same dirs
  export GOFLAGS="${GOFLAGS:-} -trimpath" GOTOOLCHAIN=local
  # The Debian packages download while the Go tools build (network against CPU); only runc
  # (cgo, libseccomp) and the guest (debootstrap) need them, so they wait and build last.
  local debs_pid="" status=0
  for t in "${want[@]}"; do
    i=$((i + 1))
    case $t in
      debs) debs & debs_pid=$! ;;
      runc | guest) continue ;;
      *) ensure "$t" "$i" "${#want[@]}" || status=1 ;;
    esac
    ((status == 0)) || break
  done
  if [[ -n $debs_pid ]] && ! wait "$debs_pid"; then log "FAILED to install the debian packages"; status=1; fi
  ((status == 0)) || return 1
  for t in "${want[@]}"; do
    case $t in runc | guest) ensure "$t" "${#want[@]}" "${#want[@]}" || return 1 ;; esac
  done
  log "tools ready in $BIN ($((SECONDS - t0)) s)"
}
main "$@"

#!/usr/bin/env bash
# Builds, and caches in bin/, everything the one-node cluster of make e2e
# runs, from the Go module proxy and this machine's Debian packages; nothing
# is pulled from a registry.
#
#   hack/cluster/build.sh       # about 15 minutes on 2 cores the first time, seconds after
#
#   bin/k8s/         kube-apiserver, etcd       hack/setup-envtest.sh (shared with envtest)
#   bin/cluster/     kubelet, kube-controller-manager, kube-scheduler, kube-proxy
#                    (k8s.io/kubernetes v$KUBE_VERSION, built as kube-apiserver is),
#                    coredns (github.com/coredns/coredns v$COREDNS_VERSION),
#                    local-path-provisioner (github.com/rancher/local-path-provisioner
#                    v$LOCAL_PATH_VERSION: the cluster's dynamic storage),
#                    kube-router (github.com/cloudnativelabs/kube-router/v2
#                    v$KUBE_ROUTER_VERSION: its NetworkPolicy firewall only; security
#                    flaws are reported for this version: pinned for the test
#                    cluster, never shipped)
#   bin/cluster/images/*.tar   OCI archives (hack/imagebuild): pause, coredns,
#                    local-path-provisioner and its volume-helper,
#                    redis and nginx (Debian's, with the libraries ldd lists),
#                    the tests' client, and Sluice's operator and limiter
#                    (rebuilt every time: they are the code under test)
#   bin/cluster/images/previous/*.tar   the operator and limiter of the
#                    previous release (hack/previous-release, a commit of this
#                    clone's history), which the journey installs and then
#                    upgrades from: built again only when that commit changes
#
# Each binary is rebuilt only when it is missing or its pinned version
# changes; bin/cluster/images/images.txt lists the image references.
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-1.33.13}"
COREDNS_VERSION="${COREDNS_VERSION:-1.12.4}"
LOCAL_PATH_VERSION="${LOCAL_PATH_VERSION:-0.0.30}"
KUBE_ROUTER_VERSION="${KUBE_ROUTER_VERSION:-2.1.0}"
E2E_REGISTRY="${E2E_REGISTRY:-e2e.sluice.local}"
PREVIOUS_RELEASE="${PREVIOUS_RELEASE:-}"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=hack/lib/kube-version.sh
source "$root/hack/lib/kube-version.sh"
out="${CLUSTER_BIN:-$root/bin/cluster}"
images="$out/images"
mkdir -p "$out" "$images"
export GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0

log() { echo "cluster-build: $*" >&2; }
stamp_is() { [[ -f "$1" && "$(cat "$1")" == "$2" ]]; }

# go_install NAME DIR GO-INSTALL-ARGS...: go install into DIR, again after
# 10s when it fails (the module proxy sometimes answers 503; what was
# fetched or compiled stays cached), three tries in all.
go_install() {
  local name=$1 dir=$2 try
  shift 2
  for try in 1 2 3; do
    GOBIN="$dir" go install "$@" && return 0
    [[ $try -lt 3 ]] || return 1
    log "go install $name failed; trying again"
    sleep 10
  done
}
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# kube-apiserver and etcd: the envtest build, cached in bin/k8s.
KUBE_VERSION="$KUBE_VERSION" "$root/hack/setup-envtest.sh" >/dev/null

# The node's binaries, built as hack/setup-envtest.sh builds kube-apiserver:
# one module that requires k8s.io/kubernetes with every staging module
# pinned to its published v0.x release, and each command's own main.go.
build_kube() {
  local want="kubelet kube-controller-manager kube-scheduler kube-proxy=$KUBE_VERSION stamped"
  local c ok=true
  for c in kubelet kube-controller-manager kube-scheduler kube-proxy; do [[ -x "$out/$c" ]] || ok=false; done
  if $ok && stamp_is "$out/.kube-versions" "$want"; then return; fi
  log "building kubelet, kube-controller-manager, kube-scheduler and kube-proxy v$KUBE_VERSION (about 9 minutes on 2 cores after kube-apiserver)"
  local dir="$work/kube" staging="0.${KUBE_VERSION#1.}" gomod srcdir
  mkdir -p "$dir"
  gomod="$(go mod download -json "k8s.io/kubernetes@v$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  srcdir="$(go mod download -json "k8s.io/kubernetes@v$KUBE_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
  {
    echo "module sluice.local/cluster-kube"
    echo
    echo "go 1.24"
    echo
    echo "require k8s.io/kubernetes v$KUBE_VERSION"
    echo
    echo "replace ("
    sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\1#p' "$gomod" |
      while read -r m; do echo "	$m => $m v$staging"; done
    echo ")"
  } >"$dir/go.mod"
  for c in kubelet kube-controller-manager kube-scheduler kube-proxy; do
    mkdir -p "$dir/$c"
    # Each command's main is cli.Run(app.NewXCommand()) plus the log and
    # metrics registrations; take it as Kubernetes ships it.
    find "$srcdir/cmd/$c" -maxdepth 1 -name '*.go' ! -name '*_test.go' -exec cp {} "$dir/$c/" \;
    chmod u+w "$dir/$c"/*.go
  done
  local ldflags
  ldflags="$(kube_version_ldflags "$KUBE_VERSION")"
  (
    cd "$dir"
    go mod tidy >/dev/null
    mkdir -p "$dir/out"
    go build -trimpath -ldflags="$ldflags" -o "$dir/out/" ./kubelet ./kube-controller-manager ./kube-scheduler ./kube-proxy
  )
  for c in kubelet kube-controller-manager kube-scheduler kube-proxy; do
    mv -f "$dir/out/$c" "$out/$c"
  done
  echo "$want" >"$out/.kube-versions"
}

build_coredns() {
  local want="coredns=$COREDNS_VERSION"
  if [[ -x "$out/coredns" ]] && stamp_is "$out/.coredns-version" "$want"; then return; fi
  log "building coredns v$COREDNS_VERSION (about 6 minutes on 2 cores)"
  # CoreDNS's go.mod has no replace directives: go install builds it as
  # its release does, with the plugins of its committed plugin.cfg.
  go_install coredns "$work/coredns" -trimpath \
    -ldflags="-s -w -X github.com/coredns/coredns/coremain.GitCommit=v$COREDNS_VERSION" \
    "github.com/coredns/coredns@v$COREDNS_VERSION" || return 1
  mv -f "$work/coredns/coredns" "$out/coredns"
  echo "$want" >"$out/.coredns-version"
}

build_local_path() {
  local want="local-path-provisioner=$LOCAL_PATH_VERSION"
  if [[ -x "$out/local-path-provisioner" ]] && stamp_is "$out/.local-path-version" "$want"; then return; fi
  log "building local-path-provisioner v$LOCAL_PATH_VERSION (about 3 minutes on 2 cores)"
  go_install local-path-provisioner "$work/local-path" -trimpath -ldflags="-s -w" \
    "github.com/rancher/local-path-provisioner@v$LOCAL_PATH_VERSION" || return 1
  mv -f "$work/local-path/local-path-provisioner" "$out/local-path-provisioner"
  echo "$want" >"$out/.local-path-version"
}

build_kube_router() {
  local want="kube-router=$KUBE_ROUTER_VERSION"
  if [[ -x "$out/kube-router" ]] && stamp_is "$out/.kube-router-version" "$want"; then return; fi
  log "building kube-router v$KUBE_ROUTER_VERSION (about 8 minutes on 2 cores)"
  go_install kube-router "$work/kube-router" -trimpath -ldflags="-s -w" \
    "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@v$KUBE_ROUTER_VERSION" || return 1
  mv -f "$work/kube-router/kube-router" "$out/kube-router"
  echo "$want" >"$out/.kube-router-version"
}

# debian_version PKG prints the package's upstream version (7.0.15 for
# 5:7.0.15-1~deb12u10): the tag of the image made from it.
debian_version() {
  local v
  v="$(dpkg-query -W -f '${Version}' "$1")"
  v="${v#*:}"
  echo "${v%%-*}"
}

build_images() {
  "$root/hack/install-deps.sh" # redis-server and nginx
  (cd "$root" && go build -o "$out/imagebuild" ./hack/imagebuild)
  local ib="$out/imagebuild" epoch revision list="$images/images.txt.tmp"
  epoch="$(cd "$root" && git log -1 --format=%ct 2>/dev/null || echo 0)"
  revision="$(cd "$root" && git rev-parse HEAD 2>/dev/null || true)"
  : >"$list"
  # image COMPONENT IMAGE VERSION [imagebuild flags]: builds the component's
  # image unless its archive was built for this version (the tests' and
  # Sluice's images, version dev, always are).
  image() {
    local component="$1" name="$2" version="$3" archive stamp
    shift 3
    archive="$images/$name.tar"
    stamp="$images/.$name.version"
    if [[ "$version" == dev || ! -f "$archive" ]] || ! stamp_is "$stamp" "$version"; then
      SOURCE_DATE_EPOCH="$epoch" "$ib" -out "$images" -registry "$E2E_REGISTRY" -version "$version" \
        -revision "$revision" "$@" "$component" >/dev/null
      echo "$version" >"$stamp"
    fi
    echo "$E2E_REGISTRY/$name:$version" >>"$list"
  }
  image pause pause 1
  image coredns coredns "$COREDNS_VERSION" -binary "coredns=$out/coredns"
  image local-path-provisioner local-path-provisioner "$LOCAL_PATH_VERSION" -binary "local-path-provisioner=$out/local-path-provisioner"
  image volume-helper volume-helper dev
  image redis redis "$(debian_version redis-server)"
  image nginx nginx "$(debian_version nginx)"
  image e2e-client e2e-client dev
  previous_images "$ib" "$list"
  # Sluice's own images, as make images builds them, under the test registry:
  # the chart is installed with only these image settings changed.
  image operator sluice-operator dev
  image limiter sluice-limiter dev
  mv -f "$list" "$images/images.txt"
}

# previous_images IMAGEBUILD LIST: the previous release's operator and
# limiter, built from its commit's tree (git archive) as make images built
# them then, as $E2E_REGISTRY/previous/sluice-<component>:<commit>, into
# images/previous/, listed before today's (a harness that names an image
# by its last path element still finds today's). Without the commit (a
# shallow clone) none: the journey then installs this tree only and says
# that the upgrade was not exercised.
previous_images() {
  local ib="$1" list="$2" commit full dir="$images/previous" src c ok=true
  commit="${PREVIOUS_RELEASE:-$(cat "$root/hack/previous-release")}"
  if ! full="$(cd "$root" && git rev-parse --verify -q "$commit^{commit}")"; then
    log "the previous release $commit (hack/previous-release) is not in this clone's history (shallow?): no previous images; the e2e journey will not exercise the upgrade (git fetch --unshallow)"
    rm -rf "$dir"
    return 0
  fi
  for c in operator limiter; do
    [[ -f "$dir/sluice-$c.tar" ]] && stamp_is "$dir/.sluice-$c.version" "$full" || ok=false
  done
  if ! $ok; then
    log "building the previous release's operator and limiter images ($commit)"
    src="$work/previous"
    rm -rf "$dir" && mkdir -p "$src" "$dir"
    (cd "$root" && git archive --format=tar "$full") | tar -x -C "$src"
    (cd "$src" && SOURCE_DATE_EPOCH="$(cd "$root" && git log -1 --format=%ct "$full")" "$ib" -out "$dir" \
      -registry "$E2E_REGISTRY/previous" -version "$commit" -revision "$full" operator limiter >/dev/null)
    for c in operator limiter; do echo "$full" >"$dir/.sluice-$c.version"; done
  fi
  for c in operator limiter; do echo "$E2E_REGISTRY/previous/sluice-$c:$commit" >>"$list"; done
}

build_kube
build_coredns
build_local_path
build_kube_router
build_images
log "done: $out"

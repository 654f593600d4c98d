#!/usr/bin/env bash
# Builds a real kube-apiserver and etcd for the kube-sync tests
# (integration/kube), from the Go module proxy, into a cache outside the
# tree keyed by their versions, and prints where they are. A second run
# builds nothing. The tests find them there (kubetest.Binaries reads the
# versions from this file); $CAIRN_KUBE_APISERVER and $CAIRN_ETCD take
# the place of them.
#
# k8s.io/kubernetes is not meant to be required as a module: its go.mod
# replaces its 30-odd staging modules (k8s.io/api, k8s.io/apimachinery,
# ...) by ./staging/src/... directories that its module zip does not
# hold. A wrapper module requires it and replaces each of them by its
# published version instead (v0.X.Y for v1.X.Y), which is what the
# release tagged. About 6 minutes on 2 cores for kube-apiserver.
#
#   scripts/install-kube.sh          # build (once) and print the two paths
#   scripts/install-kube.sh --path   # print the two paths, build nothing
set -euo pipefail
KUBE_VERSION=v1.37.2
ETCD_VERSION=v3.7.3
dir="${XDG_CACHE_HOME:-$HOME/.cache}/cairn/kube"
apiserver="$dir/kube-apiserver-$KUBE_VERSION"
etcd="$dir/etcd-$ETCD_VERSION"
if [ "${1:-}" = --path ]; then
  echo "$apiserver"
  echo "$etcd"
  exit 0
fi
mkdir -p "$dir"
go="${GO:-go}"

# build BIN PKG: builds package PKG into BIN in a wrapper module, whose
# go.mod lines come on standard input, unless BIN is there already.
build() {
  local bin=$1 pkg=$2 start src
  [ -x "$bin" ] && return
  start=$(date +%s)
  src=$(mktemp -d "$dir/src.XXXXXX")
  (
    cd "$src"
    "$go" mod init cairn.invalid/wrapper >/dev/null 2>&1
    cat >>go.mod
    GOFLAGS=-mod=mod CGO_ENABLED=0 "$go" build -trimpath -o "$bin.tmp" "$pkg"
  ) || { rm -rf "$src"; return 1; }
  mv "$bin.tmp" "$bin"
  rm -rf "$src"
  echo "install-kube: built $(basename "$bin") in $(($(date +%s) - start)) s" >&2
}

if ! [ -x "$apiserver" ]; then
  # kubernetes's go.mod replaces its staging modules by ./staging/...
  # directories; each goes to its published version (v0.X.Y for v1.X.Y).
  mod=$(GOFLAGS=-mod=mod "$go" mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')
  staging=$(sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\) => \./staging/.*#\1#p' "$mod")
  n=$(echo "$staging" | grep -c .)
  [ "$n" -ge 20 ] || { echo "install-kube: found only $n staging modules in $mod" >&2; exit 1; }
  {
    echo "require k8s.io/kubernetes $KUBE_VERSION"
    for m in $staging; do echo "replace $m => $m v0.${KUBE_VERSION#v1.}"; done
  } | build "$apiserver" k8s.io/kubernetes/cmd/kube-apiserver
fi
echo "require go.etcd.io/etcd/server/v3 $ETCD_VERSION" | build "$etcd" go.etcd.io/etcd/server/v3
echo "$apiserver"
echo "$etcd"

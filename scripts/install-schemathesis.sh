#!/usr/bin/env bash
# Installs schemathesis, the property-based API tester `make fuzz-api` and
# the integration test TestOpenAPIFuzz run against docs/openapi.yaml: the
# Python package from PyPI, pinned, into a virtual environment outside the
# tree, and prints its version. The test finds it there (it reads
# SCHEMATHESIS_VERSION from this file); $CAIRN_SCHEMATHESIS names another.
#
#   scripts/install-schemathesis.sh          # install (once) and print the version
#   scripts/install-schemathesis.sh --path   # print where the binary is, install nothing
set -euo pipefail
SCHEMATHESIS_VERSION=4.32.5
venv="${XDG_CACHE_HOME:-$HOME/.cache}/cairn/schemathesis-$SCHEMATHESIS_VERSION"
if [ "${1:-}" = --path ]; then
  echo "$venv/bin/schemathesis"
  exit 0
fi
if ! "$venv/bin/schemathesis" --version >/dev/null 2>&1; then
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
fi
"$venv/bin/schemathesis" --version

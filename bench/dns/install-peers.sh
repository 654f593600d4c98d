#!/usr/bin/env bash
# install-peers.sh: install the DNS benchmark's tools and peers, idempotently.
#
#   bench/dns/install-peers.sh          # as root (apt-get); safe to re-run
#
# From Debian: dnsperf (load generator), knot (peer), knot-dnsutils (kdig),
# dnsutils (dig), gnuplot-nox (plot). CoreDNS is built from the Go module
# proxy into PEERS_DIR, outside the repository, never committed:
#
#   PEERS_DIR      where the coredns binary goes (default /tmp/cairn-bench-peers)
#   COREDNS_VERSION  module version (default v1.15.0, the one the research used)
#
# Prints the path of the coredns binary on its last line.
set -euo pipefail

PEERS_DIR=${PEERS_DIR:-/tmp/cairn-bench-peers}
COREDNS_VERSION=${COREDNS_VERSION:-v1.15.0}

# Debian package → a command it provides.
declare -A want=(
	[dnsperf]=dnsperf
	[knot]=knotd
	[knot-dnsutils]=kdig
	[dnsutils]=dig
	[gnuplot-nox]=gnuplot
)
missing=()
for pkg in "${!want[@]}"; do
	if ! command -v "${want[$pkg]}" >/dev/null 2>&1 && [[ ! -x /usr/sbin/${want[$pkg]} ]]; then
		missing+=("$pkg")
	fi
done
if ((${#missing[@]} > 0)); then
	echo "install-peers: apt-get install ${missing[*]}" >&2
	if [[ $(id -u) -ne 0 ]]; then
		echo "install-peers: not root; install them by hand: apt-get install -y ${missing[*]}" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	# Debian's knot package would start its own knot.service (port 53, where
	# an init system runs); a policy-rc.d that exits 101 keeps it from
	# starting, and is removed afterwards unless it was there before.
	guard=0
	if [[ ! -e /usr/sbin/policy-rc.d ]]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod +x /usr/sbin/policy-rc.d
		guard=1
	fi
	rc=0
	{ apt-get install -y --no-install-recommends "${missing[@]}" ||
		{ apt-get update && apt-get install -y --no-install-recommends "${missing[@]}"; }; } >&2 || rc=$?
	if ((guard)); then rm -f /usr/sbin/policy-rc.d; fi
	((rc == 0)) || exit "$rc"
fi

coredns=$PEERS_DIR/coredns
stamp=$PEERS_DIR/coredns.version
if [[ ! -x $coredns || "$(cat "$stamp" 2>/dev/null)" != "$COREDNS_VERSION" ]]; then
	echo "install-peers: go install github.com/coredns/coredns@$COREDNS_VERSION into $PEERS_DIR" >&2
	mkdir -p "$PEERS_DIR"
	# pkg@version builds in module mode with CoreDNS's own go.mod; running it
	# outside the repository keeps cairn's go.mod and go.sum out of it.
	(cd "$PEERS_DIR" && GOBIN=$PEERS_DIR go install "github.com/coredns/coredns@$COREDNS_VERSION") >&2
	echo "$COREDNS_VERSION" >"$stamp"
fi
echo "$coredns"

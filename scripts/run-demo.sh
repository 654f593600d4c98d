#!/usr/bin/env bash
# Starts a single-node cairn server on loopback with its data in .cairn/,
# applies deploy/demo.yaml and registers three demo instances, then keeps
# the server in the foreground until Ctrl-C. Running it again resumes the
# same data: the registrations are identical retries and keep their
# incarnations.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=./bin/cairn
mkdir -p .cairn
"$bin" server --dev --data-dir .cairn/data &
server=$!
# Whatever ends this script, the server goes with it.
trap 'kill -TERM $server 2>/dev/null; wait $server 2>/dev/null' EXIT
trap 'exit 130' INT TERM

# Wait (at most 30 s) until the server takes writes; a server that died
# (its port taken, say) is not mistaken for another one answering there.
deadline=$((SECONDS + 30))
until kill -0 $server 2>/dev/null && "$bin" apply -f deploy/demo.yaml >/dev/null 2>&1 && kill -0 $server 2>/dev/null; do
  if ! kill -0 $server 2>/dev/null || ((SECONDS > deadline)); then
    echo "cairn server did not become ready; see its log above" >&2
    exit 1
  fi
  sleep 0.2
done
for i in 1 2 3; do
  "$bin" register --instance web-$i --address 127.0.0.1$i --port http=8080 \
    --region local --zone zone-$(( (i - 1) % 2 + 1 )) --lease-ttl 24h demo/web >/dev/null
done
cat <<'MSG'

cairn is running: API on http://127.0.0.1:8480, data in .cairn/data.
In another terminal:
  ./bin/cairn endpoints demo/web
  ./bin/cairn events demo/web
Ctrl-C stops the server.
MSG
wait $server

#!/usr/bin/env bash
# Side-by-side HTTP load on loopback: deputy's /authorize vs echofloor (a
# minimal Go HTTPS handler that only decodes and echoes a SAR), same machine,
# same run, same certificate, same load tool. Prints one JSON line per run.
# Usage: test/load/compare.sh [DURATION] [CONCURRENCY]   (from the repo root; `make load`)
set -euo pipefail
DUR=${1:-10s}
CONC=${2:-32}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$ROOT/bin
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

(cd "$ROOT/test" && go build -o "$BIN/sarload" ./load/sarload && go build -o "$BIN/echofloor" ./load/echofloor)
"$BIN/deputy" certs init --dir "$WORK/certs" >/dev/null
C=$WORK/certs

port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1]);s.close()'; }
wait_up() { for _ in $(seq 100); do curl -sk "https://127.0.0.1:$1/" -o /dev/null && return 0; sleep 0.1; done; echo "server on $1 did not start" >&2; exit 1; }

P_FLOOR=$(port); P_MTLS=$(port); P_PLAIN=$(port)
"$BIN/echofloor" -listen "127.0.0.1:$P_FLOOR" -cert "$C/tls.crt" -key "$C/tls.key" 2>"$WORK/floor.log" & PIDS+=($!)
# deputy as installed: client certificates required (kube-apiserver's CN), example policy.
"$BIN/deputy" serve --listen "127.0.0.1:$P_MTLS" --cert-dir "$C" --policy "$ROOT/examples" --log-level warn >/dev/null 2>"$WORK/mtls.log" & PIDS+=($!)
# deputy without client authentication, to isolate its cost.
"$BIN/deputy" serve --listen "127.0.0.1:$P_PLAIN" --tls-cert-file "$C/tls.crt" --tls-private-key-file "$C/tls.key" --policy "$ROOT/examples" --log-level warn >/dev/null 2>"$WORK/plain.log" & PIDS+=($!)
wait_up "$P_FLOOR"; wait_up "$P_MTLS"; wait_up "$P_PLAIN"

for proto in "" "-h2"; do
  for round in 1 2; do
    echo "# round $round ${proto:-http/1.1}"
    "$BIN/sarload" -url "https://127.0.0.1:$P_FLOOR/authorize" -cacert "$C/ca.crt" -c "$CONC" -d "$DUR" $proto | sed 's/^/floor      /'
    "$BIN/sarload" -url "https://127.0.0.1:$P_PLAIN/authorize" -cacert "$C/ca.crt" -c "$CONC" -d "$DUR" $proto | sed 's/^/deputy     /'
    "$BIN/sarload" -url "https://127.0.0.1:$P_MTLS/authorize" -cacert "$C/ca.crt" -cert "$C/kube-apiserver-client.crt" -key "$C/kube-apiserver-client.key" -c "$CONC" -d "$DUR" $proto | sed 's/^/deputy+mTLS /'
  done
done

#!/usr/bin/env bash
# Rolling stop under load: two deputies behind svcproxy (a stand-in for their
# Service: new connections only to replicas whose /readyz is green), sarload
# sending SubjectAccessReviews through it as compare.sh does; during the
# measured window each replica in turn gets SIGTERM (it turns /readyz red and
# keeps serving for shutdown.delay, then drains), exits and is started again.
# Prints one JSON line per protocol: sarload's result (errors = reviews that
# failed) and the replicas' stop times.
# Usage: test/load/rolling.sh [DURATION] [CONCURRENCY]   (from the repo root, after make build)
set -euo pipefail
DUR=${1:-20s}
CONC=${2:-32}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$ROOT/bin
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}" "${A:-}" "${B:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

(cd "$ROOT/test" && go build -o "$BIN/sarload" ./load/sarload && go build -o "$BIN/svcproxy" ./load/svcproxy)
"$BIN/deputy" certs init --dir "$WORK/certs" >/dev/null
C=$WORK/certs
cat >"$WORK/deputy.yaml" <<YAML
apiVersion: config.deputy.dev/v1alpha1
kind: DeputyConfiguration
shutdown:
  delay: 2s        # manifests/base: 5s
  gracePeriod: 10s
YAML

port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1]);s.close()'; }
ready() { for _ in $(seq 200); do curl -sf --cacert "$C/ca.crt" "https://127.0.0.1:$1/readyz" -o /dev/null && return 0; sleep 0.05; done; echo "deputy on $1 not ready" >&2; exit 1; }
start() { # start PORT LOG -> pid on stdout
  "$BIN/deputy" serve --config "$WORK/deputy.yaml" --listen "127.0.0.1:$1" --cert-dir "$C" --policy "$ROOT/examples" --log-level warn >/dev/null 2>>"$2" &
  echo $!
}
# stop PID: SIGTERM, wait for the exit, print the seconds it took
stop() { local t0; t0=$(date +%s.%N); kill -TERM "$1"; while kill -0 "$1" 2>/dev/null; do sleep 0.02; done; awk "BEGIN{print $(date +%s.%N) - $t0}"; }

P_A=$(port); P_B=$(port); P_SVC=$(port)
A=$(start "$P_A" "$WORK/a.log"); B=$(start "$P_B" "$WORK/b.log")
ready "$P_A"; ready "$P_B"
"$BIN/svcproxy" -listen "127.0.0.1:$P_SVC" -backends "127.0.0.1:$P_A,127.0.0.1:$P_B" -cacert "$C/ca.crt" -probe-period 200ms >"$WORK/svc.json" & SVC=$!
PIDS+=("$SVC")
ready "$P_SVC"

secs=${DUR%s}
for proto in "-h2" ""; do
  "$BIN/sarload" -url "https://127.0.0.1:$P_SVC/authorize" -cacert "$C/ca.crt" -cert "$C/kube-apiserver-client.crt" \
    -key "$C/kube-apiserver-client.key" -c "$CONC" -d "$DUR" -warmup 2s $proto >"$WORK/load.json" & LOAD=$!
  sleep $((2 + secs / 4))                      # warm-up, then a quarter of the measured window
  stopA=$(stop "$A")
  A=$(start "$P_A" "$WORK/a.log"); ready "$P_A"; sleep 0.5   # the proxy's next probe sees it
  stopB=$(stop "$B")
  B=$(start "$P_B" "$WORK/b.log"); ready "$P_B"
  wait "$LOAD"
  label=HTTP/1.1; [ -n "$proto" ] && label=HTTP/2
  printf '{"protocol":"%s","replica_a_stop_s":%.2f,"replica_b_stop_s":%.2f,"sarload":%s}\n' "$label" "$stopA" "$stopB" "$(cat "$WORK/load.json")"
done
kill -TERM "$SVC"; wait "$SVC" || true
echo "{\"svcproxy\":$(cat "$WORK/svc.json")}"

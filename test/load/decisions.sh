#!/usr/bin/env bash
# Decision logs on the hot path (issue 17): three deputies on loopback, the
# same build and example policy, logging.decisions none, denied and all
# (--log-decisions), their stderr, where the lines go, to files. sarload sends
# the same load to each in turn, once with only allowed SubjectAccessReviews
# (-deny-ratio 0: "denied" logs nothing) and once with DENY_RATIO of them
# not allowed (no opinion: "denied" logs each); ROUNDS rounds interleave the
# servers. Prints one JSON line per run with cpu_us_per_req, the deputy
# process's CPU time (process_cpu_seconds_total) over the requests it
# answered in the run, warm-up included: on a shared machine that figure
# moves less than requests/s. Then the lines each deputy wrote.
# Usage: test/load/decisions.sh [DURATION] [CONCURRENCY]   (from the repo root; `make load-decisions`)
set -euo pipefail
DUR=${1:-10s}
CONC=${2:-32}
DENY_RATIO=${DENY_RATIO:-0.5}
ROUNDS=${ROUNDS:-2}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$ROOT/bin
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

(cd "$ROOT/test" && go build -o "$BIN/sarload" ./load/sarload)
"$BIN/deputy" certs init --dir "$WORK/certs" >/dev/null
C=$WORK/certs

port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1]);s.close()'; }
wait_up() { for _ in $(seq 100); do curl -sk "https://127.0.0.1:$1/" -o /dev/null && return 0; sleep 0.1; done; echo "server on $1 did not start" >&2; exit 1; }

cpu() { curl -s --cacert "$C/ca.crt" "https://127.0.0.1:$1/metrics" | awk '/^process_cpu_seconds_total/{print $2}'; }

declare -A PORT
for mode in none denied all; do
  PORT[$mode]=$(port)
  # No client certificates, to isolate deputy's own cost (as compare.sh's "deputy").
  "$BIN/deputy" serve --listen "127.0.0.1:${PORT[$mode]}" --tls-cert-file "$C/tls.crt" --tls-private-key-file "$C/tls.key" \
    --policy "$ROOT/examples" --log-level warn --log-decisions "$mode" >/dev/null 2>"$WORK/$mode.log" & PIDS+=($!)
done
for mode in none denied all; do wait_up "${PORT[$mode]}"; done

for ratio in 0 "$DENY_RATIO"; do
  for round in $(seq "$ROUNDS"); do
    echo "# deny-ratio $ratio round $round"
    # The order rotates per round, so that no mode always runs first.
    modes=(none denied all); k=$((round % 3)); order=("${modes[@]:k}" "${modes[@]:0:k}")
    for mode in "${order[@]}"; do
      before=$(cpu "${PORT[$mode]}")
      res=$("$BIN/sarload" -url "https://127.0.0.1:${PORT[$mode]}/authorize" -cacert "$C/ca.crt" -c "$CONC" -d "$DUR" -deny-ratio "$ratio")
      after=$(cpu "${PORT[$mode]}")
      python3 -c 'import json,sys; r=json.loads(sys.argv[1]); r["cpu_us_per_req"]=round((float(sys.argv[3])-float(sys.argv[2]))*1e6/max(r["sent"],1),1); print(json.dumps(r))' \
        "$res" "$before" "$after" | sed "s/^/$(printf '%-7s' "$mode")/" | tee -a "$WORK/results"
    done
  done
done
for mode in none denied all; do
  echo "# $mode: $(grep -c '"msg":"decision"' "$WORK/$mode.log" || true) decision lines, dropped: $(curl -s --cacert "$C/ca.crt" "https://127.0.0.1:${PORT[$mode]}/metrics" | grep '^deputy_decision_logs_dropped_total' || true)"
done
# Medians per deny ratio and mode, and their ratio to "none".
python3 - "$WORK/results" <<'PY'
import json, re, statistics as st, sys
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r'^(none|denied|all)\s+(\{.*\})$', line.strip())
    if m:
        r = json.loads(m.group(2))
        rows.setdefault((r["deny_ratio"], m.group(1)), []).append(r)
for ratio in sorted({k[0] for k in rows}):
    base = rows[(ratio, "none")]
    brps, bcpu = st.median(r["rps"] for r in base), st.median(r["cpu_us_per_req"] for r in base)
    for mode in ("none", "denied", "all"):
        rs = rows.get((ratio, mode), [])
        if not rs:
            continue
        rps, cpu = st.median(r["rps"] for r in rs), st.median(r["cpu_us_per_req"] for r in rs)
        print(f"# summary deny-ratio {ratio} {mode:6s} runs {len(rs)}: rps median {rps:.0f} ({rps / brps:.2f}x none), "
              f"cpu/request median {cpu:.1f} us (none/this {bcpu / cpu:.2f}), p99 median {st.median(r['p99_us'] for r in rs):.0f} us")
PY

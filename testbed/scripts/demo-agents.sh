#!/usr/bin/env bash
# The two agents on loopback over a dataset: one epoch per static plan,
# printing what crossed the link and how long the epoch took. Part of
# `make demo` until the testbed runs the full policy comparison.
#
# Usage: testbed/scripts/demo-agents.sh DATASET_DIR
set -euo pipefail
cd "$(dirname "$0")/../.."
data=${1:?usage: demo-agents.sh DATASET_DIR}
work=$(mktemp -d)
port=${DEMO_PORT:-17070}
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT

bin/storage-agent --data "$data" --listen "127.0.0.1:$port" --cpus 1 --log-level warn &
pid=$!
for _ in $(seq 100); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  kill -0 "$pid" 2>/dev/null || { echo "demo: storage agent exited" >&2; exit 1; }
  sleep 0.1
done
printf '\n%-10s %8s %10s %12s %14s %12s\n' plan samples seconds "wire MB" "storage CPU s" "compute CPU s"
for plan in nooff resizeoff alloff; do
  bin/compute-agent --storage "127.0.0.1:$port" --pipeline imagenet-train --plan "$plan" \
    --epochs 1 --gpu sim:alexnet-v100 --report "$work/$plan.jsonl" --log-level error
  /usr/bin/python3 - "$plan" "$work/$plan.jsonl" <<'PY'
import json, sys
r = json.loads(open(sys.argv[2]).readline())
print(f"{sys.argv[1]:<10} {r['samples']:>8} {r['seconds']:>10.2f} {r['bytes_received']/1e6:>12.1f} "
      f"{r['storage_cpu_seconds']:>14.2f} {r['compute_cpu_seconds']:>12.2f}")
PY
done

#!/usr/bin/env bash
# Header bombs against a first plan from estimates: the same generated
# dataset without bombs, with 1 and with 16 header-only 65535x65535 JPEGs
# (testbed gen --header-bombs), each run with --policy optimal and no saved
# profile (the optimal-est row: epoch 0 planned from the catalog's header
# estimates) and --on-error skip, interleaved REPS times so that the
# machine's load drifts over all three alike. Prints every epoch's seconds
# and prediction, the bombs' failures, and each epoch's time over the clean
# run's same epoch (median over the repetitions). Needs root for the
# namespaces (else testbed run falls back to loopback and says so).
#
# Usage: sudo testbed/scripts/header-bombs.sh [IMAGES] [KIND] [SEED] [RATE] [CPUS] [EPOCHS] [REPS]
#   defaults: 200 imagenet-like 11 100mbit 1 4 3
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${1:-200} kind=${2:-imagenet-like} seed=${3:-11} rate=${4:-100mbit} cpus=${5:-1} epochs=${6:-4} reps=${7:-3}
bin=$PWD/bin
work=${HEADER_BOMBS_DIR:-$(mktemp -d)}
[ -x "$bin/compute-agent" ] && [ -x "$bin/storage-agent" ] && [ -x "$bin/testbed" ] ||
  go build -o bin/ ./storage-agent ./compute-agent ./testbed/cmd/testbed
for b in 0 1 16; do
  [ -d "$work/data-$b" ] || "$bin/testbed" gen --kind "$kind" -n "$n" --seed "$seed" --header-bombs "$b" --out "$work/data-$b" >/dev/null 2>&1
done
for r in $(seq 1 "$reps"); do
  for b in 0 1 16; do
    "$bin/testbed" run --data "$work/data-$b" --policies optimal-est --no-peer --rate "$rate" --storage-cpus "$cpus" \
      --epochs "$epochs" --compute-flags "--on-error skip" --quiet --out "$work/out-$b-$r" >"$work/run-$b-$r.log" 2>&1 ||
      { echo "run bombs=$b rep=$r failed: $work/run-$b-$r.log" >&2; exit 1; }
  done
done
python3 - "$work" "$reps" <<'PY'
import glob, json, statistics, sys
work, reps = sys.argv[1], int(sys.argv[2])
runs = {}
for b in (0, 1, 16):
    for r in range(1, reps + 1):
        (f,) = glob.glob(f"{work}/out-{b}-{r}/*/optimal-est.jsonl")
        runs[b, r] = [json.loads(l) for l in open(f)]
print(f"data: {work}")
print("bombs rep epoch   sec  pred  meas/pred failed  vs clean")
ratios = {}
for (b, r), eps in sorted(runs.items()):
    for e in eps:
        clean = runs[0, r][e["epoch"]]["seconds"]
        ratios.setdefault((b, e["epoch"]), []).append(e["seconds"] / clean)
        pred = e.get("predicted_seconds") or 0
        print(f"{b:5d} {r:3d} {e['epoch']:5d} {e['seconds']:5.2f} {pred:5.2f} {e['seconds']/pred if pred else 0:9.2f} {e.get('samples_failed', 0):6d} {e['seconds']/clean:9.3f}")
print("median over repetitions, epoch time over the clean run's:")
for (b, ep), v in sorted(ratios.items()):
    if b:
        print(f"  {b:2d} bombs, epoch {ep}: {statistics.median(v):.3f} (range {min(v):.3f}-{max(v):.3f})")
PY

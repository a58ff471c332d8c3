#!/usr/bin/env bash
# Ours vs the torchvision peer, per core, on the same JPEGs, side by side in
# one run. Both are pinned to the same CPU; the runs alternate so that noise
# on this shared machine hits both alike. Prints a table with the ratios.
#
# Usage: testbed/scripts/peer-compare.sh [SECONDS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-4}
rounds=${2:-2}
bin=bin/testbed
py=/usr/bin/python3
peer=testbed/peer/torchvision_bench.py
work=${PEER_DIR:-$(mktemp -d)}
trap '[ -z "${PEER_DIR:-}" ] && rm -rf "$work"' EXIT

[ -x "$bin" ] || go build -o bin/ ./testbed/cmd/...
if ! $py -c 'import torchvision, PIL' 2>/dev/null; then
  echo "peer-compare: torchvision is missing; install it with: apt-get install python3-torchvision python3-pil" >&2
  exit 1
fi
cpu=0
pin="taskset -c $cpu"
command -v taskset >/dev/null || pin=""

rate() { sed -n 's/.*img_per_s=\([0-9.]*\).*/\1/p'; }

printf '%-10s %-22s %12s %12s %8s\n' class pipeline "ours img/s" "peer img/s" ratio
for size in 500x375 1600x1200; do
  dir=$work/$size
  [ -d "$dir" ] || $bin gen --size "$size" -n 48 --out "$dir" 2>/dev/null
  for preset in decode-only imagenet-train imagenet-train-fast; do
    ourspec=$preset
    [ "$preset" = decode-only ] && ourspec=testbed/scripts/decode-only.yaml
    ours=(); theirs=()
    for ((r = 0; r < rounds; r++)); do
      theirs+=("$($pin $py $peer "$dir" "$preset" "$secs" | rate)")
      ours+=("$(GOMAXPROCS=1 $pin $bin ops --data "$dir" --spec "$ourspec" --bench "$secs" 2>/dev/null | rate)")
    done
    o=$(printf '%s\n' "${ours[@]}" | awk '{s+=$1} END {printf "%.1f", s/NR}')
    t=$(printf '%s\n' "${theirs[@]}" | awk '{s+=$1} END {printf "%.1f", s/NR}')
    printf '%-10s %-22s %12s %12s %7.2fx\n' "$size" "$preset" "$o" "$t" "$(awk -v a="$o" -v b="$t" 'BEGIN {print a/b}')"
  done
done

#!/usr/bin/env bash
# The compute node's cache over a shaped link (two network namespaces, tc tbf
# both ways), 4 epochs per run: a run without cache (the reference), one
# whose plan file keeps PCT% of the samples resident (the planned cache, a
# budget of PCT% of the dataset's bytes), and, below 100%, No-Off through an
# LRU cache of raw files under the same budget. Prints each epoch's seconds,
# link MB and cache hits, epoch 0 over the later epochs, and whether every
# run delivered the reference's tensors. Needs root.
#
# Usage: sudo testbed/scripts/cache-val.sh [IMAGES] [RATE] [PIPELINE] [KIND] [PCT]
#   defaults: 300 100mbit imagenet-val imagenet-like 100 (the validation
#   preset with its finished outputs cached); e.g. 300 100mbit
#   imagenet-train openimages-like 25 for raw files against the LRU.
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${1:-300}
rate=${2:-100mbit}
pipeline=${3:-imagenet-val}
kind=${4:-imagenet-like}
pct=${5:-100}
bin=$PWD/bin
work=${CACHE_VAL_DIR:-$(mktemp -d)}
[ -x "$bin/compute-agent" ] && [ -x "$bin/storage-agent" ] && [ -x "$bin/testbed" ] ||
  go build -o bin/ ./storage-agent ./compute-agent ./testbed/cmd/testbed
[ -d "$work/data" ] || "$bin/testbed" gen --kind "$kind" --n "$n" --seed 1 --out "$work/data" >/dev/null 2>&1
s=cvS$$ c=cvC$$
cleanup() {
  [ -n "${sp:-}" ] && kill "$sp" 2>/dev/null && wait "$sp" 2>/dev/null
  ip netns del $s 2>/dev/null || true
  ip netns del $c 2>/dev/null || true
  [ -z "${CACHE_VAL_DIR:-}" ] && rm -rf "$work"
}
trap cleanup EXIT
ip netns add $s
ip netns add $c
ip link add cv0$$ type veth peer name cv1$$
ip link set cv0$$ netns $s
ip link set cv1$$ netns $c
ip -n $s addr add 10.77.0.1/24 dev cv0$$
ip -n $c addr add 10.77.0.2/24 dev cv1$$
for ns in $s $c; do ip -n $ns link set lo up; done
ip -n $s link set cv0$$ up
ip -n $c link set cv1$$ up
ip netns exec $s "$bin/testbed" shape --dev cv0$$ --rate "$rate" >/dev/null 2>&1
ip netns exec $c "$bin/testbed" shape --dev cv1$$ --rate "$rate" >/dev/null 2>&1
ip netns exec $s "$bin/storage-agent" --data "$work/data" --listen 10.77.0.1:7070 --insecure --cpus 1 \
  --log-level warn >"$work/storage.log" 2>&1 &
sp=$!
sleep 3
python3 -c "import json,sys; n,p=int(sys.argv[1]),float(sys.argv[2]); print(json.dumps({'default': 0, 'cached': list(range(round(n*p/100)))}))" "$n" "$pct" >"$work/plan.json"
bytes=$(find "$work/data" -type f -name '*.jpg' -printf '%s\n' | awk '{s+=$1} END {print s}')
budget=$((bytes * pct / 100))
if [ "$pipeline" = imagenet-val ] || [ "$pct" -ge 100 ]; then budget=$((4 << 30)); fi  # finished tensors outgrow the files
run() {
  local name=$1
  shift
  rm -f "$work/$name.jsonl" "$work/$name.samples"
  ip netns exec $c "$bin/compute-agent" --storage 10.77.0.1:7070 --insecure --pipeline "$pipeline" --epochs 4 --seed 1 \
    --gpu sim:100000 --report "$work/$name.jsonl" --samples-out "$work/$name.samples" --log-level warn --progress 0 \
    "$@" >"$work/$name.log" 2>&1
}
run ref
rm -rf "$work/cache" "$work/lru-cache"
run cached --plan "$work/plan.json" --cache-dir "$work/cache" --cache-bytes "$budget"
[ "$pct" -lt 100 ] && run lru --cache-dir "$work/lru-cache" --cache-bytes "$budget" --cache-policy lru
echo "dataset $bytes bytes, budget $budget bytes, $pct% of the samples planned resident"
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
import os
rows = {n: [json.loads(l) for l in open(f"{w}/{n}.jsonl")] for n in ("ref", "cached", "lru") if os.path.exists(f"{w}/{n}.jsonl")}
for n, rs in rows.items():
    print(f"{n:7s} seconds {[round(r['seconds'], 2) for r in rs]}  link MB {[round(r['bytes_received'] / 1e6, 1) for r in rs]}"
          f"  cache hits {[(r.get('cache') or {}).get('hits') for r in rs]}")
rs = rows["cached"]
print("cached: epoch 0 / epoch k: " + ", ".join(f"{rs[0]['seconds'] / r['seconds']:.1f}x" for r in rs[1:]))
a = sorted(open(f"{w}/ref.samples").read().split("\n"))
for n in rows:
    if n != "ref":
        print(f"{n}: tensors identical to the run without cache:", sorted(open(f"{w}/{n}.samples").read().split("\n")) == a)
PY

#!/usr/bin/env bash
# gpu-q95.sh: issue 30's check on a GPU machine (docs/results.md, "On a GPU
# machine: the compressed crop"). From the repository root, binaries built:
#
#   OUT=/tmp/gpu-q95 testbed/scripts/gpu-q95.sh
#
# 1. The model's own rate: train_cnn.py --from-memory, one random batch of
#    128 held on the GPU, for each precision (fp32, amp).
# 2. For each data set (KINDS, N generated photos each), precision and
#    pipeline (imagenet-train, imagenet-train-q95), one gpu-check.sh run: the
#    trainer row trains MODEL through the client at RATE; the fp32
#    imagenet-train run adds the DataLoader peer (it is CPU-bound: the
#    precision does not move it, and it has no q95 preset).
# 3. gpu_table.py: the table, and table.json.
#
# Each run lands in $OUT/KIND-PRECISION-PIPELINE; the data in $OUT.data-KIND
# (kept for a second call).
set -uo pipefail
OUT=${OUT:-/tmp/gpu-q95} KINDS=${KINDS:-imagenet-like openimages-like} N=${N:-2000}
PRECISIONS=${PRECISIONS:-fp32 amp} PIPELINES=${PIPELINES:-imagenet-train imagenet-train-q95}
MODEL=${MODEL:-resnet50} STEPS=${STEPS:-40} PY=${PY:-python3} BIN=${BIN:-bin} MEMORY=${MEMORY:-1}
export PYTHONUNBUFFERED=1
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
mkdir -p "$OUT"

if [ "$MEMORY" = 1 ]; then
	for prec in $PRECISIONS; do
		amp=0
		[ "$prec" = amp ] && amp=1
		SOPHON_TRAIN_AMP=$amp "$PY" "$root/python/examples/train_cnn.py" --model "$MODEL" --device "${DEVICE:-cuda}" \
			--from-memory "$STEPS" --batch 128 2>&1 | tee "$OUT/memory-$prec.json"
	done
fi
for kind in $KINDS; do
	[ -d "$OUT.data-$kind" ] || "$BIN/testbed" gen --kind "$kind" -n "$N" --out "$OUT.data-$kind" >/dev/null &
done
wait
for kind in $KINDS; do
	for prec in $PRECISIONS; do
		for pipe in $PIPELINES; do
			amp=0 peer=0
			[ "$prec" = amp ] && amp=1
			[ "$prec" = fp32 ] && [ "$pipe" = imagenet-train ] && peer=1
			echo "== $kind $prec $pipe ($(date +%T))"
			OUT="$OUT/$kind-$prec-$pipe" DATA="$OUT.data-$kind" KIND=$kind PIPELINE=$pipe PEER=$peer AMP=$amp \
				MODEL=$MODEL PY=$PY BIN=$BIN "$here/gpu-check.sh" >"$OUT/$kind-$prec-$pipe.log" 2>&1
			echo "   exit $? ($(date +%T))"
		done
	done
done
"$PY" "$here/gpu_table.py" "$OUT" --json "$OUT/table.json" | tee "$OUT/table.md"

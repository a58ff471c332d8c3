#!/usr/bin/env bash
# gpu-check.sh: the checks only a machine with an NVIDIA GPU can run
# (docs/results.md, "On a GPU machine"). From the repository root, with the
# binaries built (make build): (BIN=DIR names another folder of them)
#
#   OUT=/tmp/gpu-check testbed/scripts/gpu-check.sh
#
# 1. The testbed's trainer row trains a torchvision model (MODEL, default
#    resnet50) on the GPU through python/sophon's Loader, fed by a real
#    compute agent (--train-policy POLICY) over the shaped link, and the peer
#    row trains the same model from torchvision's DataLoader over the same
#    link: images/s reaching each training loop, side by side.
# 2. nvidia-smi's utilisation, sampled every 200 ms, against the compute
#    agent's own NVML reading (each epoch report's gpu.mean_util_pct) over
#    the same epochs.
# 3. The trainer's wait per batch (the agent's trainers[].wait_seconds).
#
# CACHE=25% (or bytes) gives every compute agent, the trainer's too, a fresh
# cache of that budget (testbed --cache-bytes). PIPELINE=imagenet-train-q95
# runs the trainer row on that preset (the peer knows only the lossless
# ones: PEER=0 leaves it out), AMP=1 trains in mixed precision (bfloat16
# autocast, train_cnn.py --amp; the peer too), and DATA=DIR reuses a folder.
#
# As root with ip and tc the link is two namespaces and tc tbf at RATE;
# otherwise the testbed's loopback mode with its in-process token bucket.
# Everything lands in $OUT: results.json, report.md, the trainer row's agent
# report and trainer output, smi.log and gpu-summary.json.
set -uo pipefail
OUT=${OUT:-/tmp/gpu-check}
N=${N:-2000} KIND=${KIND:-imagenet-like} RATE=${RATE:-500mbit} CPUS=${CPUS:-4}
EPOCHS=${EPOCHS:-3} BATCH=${BATCH:-128} MODEL=${MODEL:-resnet50} POLICY=${POLICY:-optimal}
PY=${PY:-python3} DATA=${DATA:-/tmp/gpu-check-data} BIN=${BIN:-bin}
PIPELINE=${PIPELINE:-imagenet-train} PEER=${PEER:-1}
export SOPHON_TRAIN_MODEL=$MODEL SOPHON_TRAIN_DEVICE=${DEVICE:-cuda} SOPHON_TRAIN_AMP=${AMP:-0} PYTHONUNBUFFERED=1
mkdir -p "$OUT"
here=$(cd "$(dirname "$0")" && pwd)

nvidia-smi -L || true
"$PY" -c 'import torch, torchvision; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), "torchvision", torchvision.__version__)'

smi=""
if command -v nvidia-smi >/dev/null; then
	(nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 200 |
		while read -r u; do echo "$(date +%s%N) $u"; done >"$OUT/smi.log") &
	smi=$!
fi
cleanup() { [ -n "$smi" ] && pkill -P "$smi" nvidia-smi 2>/dev/null; [ -n "$smi" ] && kill "$smi" 2>/dev/null; true; }
trap cleanup EXIT

extra=()
[ -z "${CACHE:-}" ] || extra=(--cache-bytes "$CACHE")
[ "$PEER" = 1 ] || extra+=(--no-peer)
mode=()
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null || ! command -v tc >/dev/null ||
	! ip netns add sophon-gpucheck-probe 2>/dev/null; then
	echo "gpu-check: no namespaces here (not root, or no ip/tc): the testbed's loopback mode"
	mode=(--mode loopback)
else
	ip netns del sophon-gpucheck-probe
fi

[ -d "$DATA" ] || "$BIN/testbed" gen --kind "$KIND" -n "$N" --out "$DATA"
run="$OUT.run"
bed() {
	rm -rf "$run"
	"$BIN/testbed" run --data "$DATA" --rate "$RATE" --storage-cpus "$CPUS" --epochs "$EPOCHS" \
		--batch "$BATCH" --pipeline "$PIPELINE" --policies nooff --train --train-policy "$POLICY" --python "$PY" \
		"${extra[@]}" "$@" --out "$run" 2>&1 | tee -a "$OUT/run.log"
}
if ! bed "${mode[@]}"; then
	[ ${#mode[@]} -eq 0 ] || exit 1
	echo "gpu-check: the namespace run failed; again in the testbed's loopback mode" | tee -a "$OUT/run.log"
	bed --mode loopback
fi
cleanup

cell=$(dirname "$(find "$run" -name sophon-client.jsonl | head -1)")
cp "$run/results.json" "$run/report.md" "$cell/sophon-client.jsonl" "$cell/sophon-client.out" "$OUT/"
"$PY" "$here/gpu_summary.py" --results "$run/results.json" --report "$cell/sophon-client.jsonl" \
	--smi "$OUT/smi.log" | tee "$OUT/gpu-summary.json"

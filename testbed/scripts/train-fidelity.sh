#!/usr/bin/env bash
# Training accuracy through the compressed-crop pipelines (make train-fidelity;
# docs/training.md, "Compressed pipelines").
#
# Generates a labelled set (testbed gen's photo-like images at 500x375, a
# class pattern drawn over them by labelled_set.py, 4 classes x
# TRAIN_PER_CLASS training images and the rest held out), then trains
# python/examples/train_cnn.py (the small CNN) through the real agents for
# EPOCHS epochs, once per pipeline and seed: a storage agent per split, a
# compute agent serving the training split with the pipeline under test
# (strict order, --seed S, No-Off) and a second one serving the held-out
# split with imagenet-val, read after every epoch (--eval-socket). The
# trainer's own --seed is S too. It prints each run's final held-out
# accuracy and, per pipeline, the seeds' mean, min and max, and where a
# compressed pipeline's mean final accuracy lies against the lossless
# pipeline's [min, max] over the seeds: within, above or below; it fails
# only below (train_fidelity_summary.py, which reruns on an OUT folder).
#
#   testbed/scripts/train-fidelity.sh [OUT]     (OUT: a fresh folder; default
#                                               a new one under $TMPDIR or /tmp)
#
# Environment: BIN (bin), PYTHON (/usr/bin/python3), SEEDS ("1 2 3"),
# EPOCHS (10), PIPELINES ("imagenet-train imagenet-train-q95
# imagenet-train-q90", the first the reference), IMAGES (500),
# TRAIN_PER_CLASS (100), SIZE (500x375), DATA_SEED (11), BATCH (8),
# AMPLITUDE (30,60) and PERIOD (28,56): the class pattern's range, LR (0.02):
# the trainer's --lr.
# CPU heavy (a few minutes on 2 cores): not part of make test.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${BIN:-$ROOT/bin}
PYTHON=${PYTHON:-/usr/bin/python3}
SEEDS=${SEEDS:-1 2 3}
EPOCHS=${EPOCHS:-10}
PIPELINES=${PIPELINES:-imagenet-train imagenet-train-q95 imagenet-train-q90}
IMAGES=${IMAGES:-500}
TRAIN_PER_CLASS=${TRAIN_PER_CLASS:-100}
SIZE=${SIZE:-500x375}
DATA_SEED=${DATA_SEED:-11}
BATCH=${BATCH:-8}
AMPLITUDE=${AMPLITUDE:-30,60}
PERIOD=${PERIOD:-28,56}
LR=${LR:-0.02}
OUT=${1:-$(mktemp -d "${TMPDIR:-/tmp}/train-fidelity.XXXXXX")}

for b in testbed storage-agent compute-agent; do
	[[ -x $BIN/$b ]] || { echo "train-fidelity: $BIN/$b missing (make build)" >&2; exit 1; }
done
if [[ -e $OUT && -n $(ls -A "$OUT") ]]; then
	echo "train-fidelity: $OUT is not empty; give a fresh folder" >&2
	exit 1
fi
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

pids=()
cleanup() {
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

free_port() { "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# wait_for PATH PID: until the agent PID listens on the unix socket PATH.
wait_for() {
	for _ in $(seq 600); do
		[[ -S $1 ]] && return 0
		kill -0 "$2" 2>/dev/null || { echo "train-fidelity: agent exited before listening on $1" >&2; return 1; }
		sleep 0.1
	done
	echo "train-fidelity: no socket $1 after 60 s" >&2
	return 1
}

# wait_port PORT PID: until the storage agent PID accepts on PORT.
wait_port() {
	for _ in $(seq 600); do
		"$PYTHON" -c "import socket; socket.create_connection(('127.0.0.1', $1), 1).close()" 2>/dev/null && return 0
		kill -0 "$2" 2>/dev/null || { echo "train-fidelity: storage agent exited" >&2; return 1; }
		sleep 0.1
	done
	echo "train-fidelity: nothing listens on port $1 after 60 s" >&2
	return 1
}

echo "== data: $IMAGES images at $SIZE (testbed gen --seed $DATA_SEED), labelled, $TRAIN_PER_CLASS per class to train"
"$BIN/testbed" gen --size "$SIZE" -n "$IMAGES" --seed "$DATA_SEED" --out "$OUT/base" 2>&1 | tail -1
"$PYTHON" "$ROOT/testbed/scripts/labelled_set.py" --src "$OUT/base" --out "$OUT/data" \
	--classes 4 --train-per-class "$TRAIN_PER_CLASS" --seed "$DATA_SEED" \
	--amplitude "$AMPLITUDE" --period "$PERIOD"

declare -A ports
for split in train val; do
	ports[$split]=$(free_port)
	"$BIN/storage-agent" --data "$OUT/data/$split" --listen "127.0.0.1:${ports[$split]}" --insecure \
		--cpus 1 --log-level warn >"$OUT/storage-$split.log" 2>&1 &
	pids+=($!)
	wait_port "${ports[$split]}" $!
done

for pipeline in $PIPELINES; do
	for seed in $SEEDS; do
		run=$OUT/runs/$pipeline/seed$seed
		mkdir -p "$run"
		"$BIN/compute-agent" --storage "127.0.0.1:${ports[train]}" --insecure --trainer-socket "$run/train.sock" \
			--pipeline "$pipeline" --seed "$seed" --epochs "$EPOCHS" --strict-order --batch "$BATCH" \
			--plan nooff --report "$run/train-epochs.jsonl" --log-level warn >"$run/agent-train.log" 2>&1 &
		train_pid=$!
		pids+=("$train_pid")
		"$BIN/compute-agent" --storage "127.0.0.1:${ports[val]}" --insecure --trainer-socket "$run/val.sock" \
			--pipeline imagenet-val --seed "$seed" --epochs "$EPOCHS" --strict-order --batch "$BATCH" \
			--plan nooff --log-level warn >"$run/agent-val.log" 2>&1 &
		val_pid=$!
		pids+=("$val_pid")
		wait_for "$run/train.sock" "$train_pid"
		wait_for "$run/val.sock" "$val_pid"
		start=$(date +%s)
		"$PYTHON" "$ROOT/python/examples/train_cnn.py" --socket "$run/train.sock" --eval-socket "$run/val.sock" \
			--epochs "$EPOCHS" --num-classes 4 --seed "$seed" --lr "$LR" >"$run/trainer.jsonl" 2>"$run/trainer.err" ||
			{ echo "train-fidelity: trainer failed ($run/trainer.err)" >&2; cat "$run/trainer.err" >&2; exit 1; }
		kill "$train_pid" "$val_pid" 2>/dev/null || true
		wait "$train_pid" "$val_pid" 2>/dev/null || true
		echo "$pipeline seed $seed: $(tail -1 "$run/trainer.jsonl") ($(($(date +%s) - start)) s)"
	done
done

"$PYTHON" "$ROOT/testbed/scripts/train_fidelity_summary.py" "$OUT" $PIPELINES

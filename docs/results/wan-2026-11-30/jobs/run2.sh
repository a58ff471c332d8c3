#!/bin/bash
# issue 31 item 4: after the worker-share fix (budget time priced at the agent's whole budget)
B=/work/main/bin
O=/work/jobs31
run() { name=$1; shift; $B/testbed run --bin $B --storage-cpus 1 --jobs 2 --job-links --jobs-whole-budget --policies optimal --epochs 4 --no-peer --insecure --quiet "$@" --out $O/$name > $O/$name.log 2>&1; echo "$name rc=$? $(date +%T)"; }
run oi100-s173-fix --gen openimages-like:200 --seed 173 --rate 100mbit --repeat 2
run oi50-s173-fix --gen openimages-like:200 --seed 173 --rate 50mbit
echo done

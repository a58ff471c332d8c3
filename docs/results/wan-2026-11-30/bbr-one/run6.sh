#!/bin/bash
# bbr (the host's) on a lossy path: one connection against eight
B=/work/bin-e23
O=/work/fe31
run() { name=$1; shift; $B/testbed run --bin $B --rate 100mbit --storage-cpus 1 --no-peer --epochs 3 --quiet --policies nooff,optimal --data /work/fe31/in157-h0/data-imagenet-like-300-s157 --seed 157 "$@" --out $O/$name > $O/$name.log 2>&1; echo "$name rc=$? $(date +%T)"; }
run bbrloss-8 --rtt 20ms,80ms --loss 0.1%
run bbrloss-1 --rtt 20ms,80ms --loss 0.1% --compute-flags "--conns 1"
echo done

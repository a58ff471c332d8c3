#!/bin/bash
# what holds optimal's link below its rate at 80 ms: default, a larger base window, one connection
B=/work/bin-e23
O=/work/fe31
run() { name=$1; shift; $B/testbed run --bin $B --rate 100mbit --storage-cpus 1 --no-peer --epochs 3 --quiet --policies nooff,optimal --rtt 80ms --data /work/fe31/in157-h0/data-imagenet-like-300-s157 --seed 157 "$@" --out $O/$name > $O/$name.log 2>&1; echo "$name rc=$? $(date +%T)"; }
run w-default
run w-256 --compute-flags "--window 256"
run w-conns1 --compute-flags "--conns 1"
run w-default2
echo done

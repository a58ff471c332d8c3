#!/bin/bash
# h2: the link probe striped + stage 1 seeding the link memory
O=/work/fe31
run() { b=$1; name=$2; shift 2; /work/bin-$b/testbed run --bin /work/bin-$b --rate 100mbit --storage-cpus 1 --no-peer --epochs 3 --quiet --policies nooff,optimal --rtt 80ms,0 "$@" --out $O/$name-$b > $O/$name-$b.log 2>&1; echo "$name-$b rc=$? $(date +%T)"; }
run h2 oi151 --gen openimages-like:300 --seed 151
run h2 in157 --gen imagenet-like:300 --seed 157
run h0 oi151b --gen openimages-like:300 --seed 151
run h2 oi151b --gen openimages-like:300 --seed 151
run h0 in157b --gen imagenet-like:300 --seed 157
run h2 in157b --gen imagenet-like:300 --seed 157
echo done

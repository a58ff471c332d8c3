#!/bin/bash
# issue 31 item 2: the first epoch at 80 ms, binaries before (h0, 020463d) and after (h1: the link probe striped)
O=/work/fe31
run() { b=$1; name=$2; shift 2; /work/bin-$b/testbed run --bin /work/bin-$b --rate 100mbit --storage-cpus 1 --no-peer --epochs 3 --quiet --policies nooff,optimal --rtt 80ms,0 "$@" --out $O/$name-$b > $O/$name-$b.log 2>&1; echo "$name-$b rc=$? $(date +%T)"; }
for b in h0 h1; do run $b oi151 --gen openimages-like:300 --seed 151; done
for b in h0 h1; do run $b in157 --gen imagenet-like:300 --seed 157; done
echo done

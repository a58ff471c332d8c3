#!/bin/bash
# issue 31 item 2 with cubic on both ends, binaries before (h0) and after (e23865f)
while pgrep -f run3.sh > /dev/null; do sleep 5; done
O=/work/fe31
run() { b=$1; name=$2; shift 2; /work/bin-$b/testbed run --bin /work/bin-$b --rate 100mbit --storage-cpus 1 --no-peer --epochs 3 --quiet --policies nooff,optimal --rtt 80ms,0 --cc cubic "$@" --out $O/$name-$b > $O/$name-$b.log 2>&1; echo "$name-$b rc=$? $(date +%T)"; }
for b in h0 e23; do run $b cubic-in157 --gen imagenet-like:300 --seed 157; done
for b in h0 e23; do run $b cubic-oi151 --gen openimages-like:300 --seed 151; done
echo done

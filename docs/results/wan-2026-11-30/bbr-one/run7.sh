#!/bin/bash
# one connection to a bbr sender (binaries of the working tree after e23865f + Info's tcp_congestion)
B=/work/bin-cc
O=/work/fe31
run() { name=$1; shift; $B/testbed run --bin $B --rate 100mbit --storage-cpus 1 --no-peer --epochs 3 --quiet --policies nooff,optimal "$@" --out $O/$name > $O/$name.log 2>&1; echo "$name rc=$? $(date +%T)"; }
run cc-in157 --data /work/fe31/in157-h0/data-imagenet-like-300-s157 --seed 157 --rtt 80ms,0
run cc-oi151 --data /work/fe31/oi151-h0/data-openimages-like-300-s151 --seed 151 --rtt 80ms,0
run cc-in31 --data /work/data31/in300-s31 --seed 31 --rtt 80ms,20ms,0
echo done

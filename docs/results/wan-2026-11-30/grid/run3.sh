#!/bin/bash
# issue 31 item 2 grid again with e23865f's binaries (the sets of wan.md's "Round trip without loss")
B=/work/bin-e23
O=/work/fe31
run() { name=$1; shift; $B/testbed run --bin $B --rate 100mbit --storage-cpus 1 --policies nooff,optimal --no-peer --epochs 3 --seed 31 --quiet "$@" --out $O/$name > $O/$name.log 2>&1; echo "$name rc=$? $(date +%T)"; }
run grid-oi31 --data /work/data31/oi300-s31 --rtt 80ms,20ms,0
run grid-in31 --data /work/data31/in300-s31 --rtt 80ms,20ms,0
run grid-oi32 --gen openimages-like:300 --seed 32 --rtt 80ms,0
echo done

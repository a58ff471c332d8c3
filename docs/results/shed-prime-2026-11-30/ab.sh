#!/bin/bash
# usage: ab2.sh TAG GENSPEC SEED CPUS [extra]
cd /work/main
tag=$1; gen=$2; seed=$3; cpus=$4; shift 4
for i in 1 2; do
 for mode in old new; do
  d=/tmp/ab-$tag-$mode-$i; rm -rf $d
  if [ $mode = old ]; then tb=/tmp/bin-old/testbed; else tb=bin/testbed; fi
  $tb run --gen $gen --seed $seed --rate 100mbit --storage-cpus $cpus --epochs 3 --policies resizeoff,fastflow,sophon,optimal --no-peer --out $d "$@" > $d.log 2>&1
 done
done

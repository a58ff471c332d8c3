#!/bin/bash
# sample the storage namespace's TCP sockets (ss -tin) every 25 ms during a bbr run at 80 ms
B=${B:-bin}
O=${O:-probertt-run}
mkdir -p $O
( $B/testbed run --bin $B --rate 100mbit --storage-cpus 1 --no-peer --seed 31 --quiet --data ${DATA:?testbed gen --kind imagenet-like -n 300 --seed 31} --policies nooff --rtt 80ms --epochs 6 --out $O/run > $O/run.log 2>&1; echo rc=$? > $O/rc ) &
while [ ! -f $O/rc ]; do
  for ns in $(ip netns list | awk '{print $1}' | grep -E -- "-s$"); do
    echo "T $(date +%s.%N) $ns"; ip netns exec $ns ss -tin state established 2>/dev/null | grep -E "bbr|cubic"
  done
  sleep 0.025
done > $O/ss.txt
echo done

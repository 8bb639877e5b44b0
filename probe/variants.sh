#!/usr/bin/env bash
# One-off: fence policy variants on the H100 (not committed).
set -u
source scripts/gpu-common.sh
OUT=${OUT:-/tmp/o}; mkdir -p $OUT
cci_find_workloads; cci_need_uthash >/dev/null
run() { # name workload env...
  local n=$1 w=$2; shift 2
  env "$@" $PYTHON tests/bench/torch_run.py "$CCI_WORKLOADS" $w --steps 10 2>$OUT/$n-$w.err | tail -1 | python3 -c "
import json,sys
r=json.loads(sys.stdin.read()); c=r.get('cci') or {}
print('%-10s %-8s %7.0f MiB %6.3f s fences %s waits %s' % ('$n','$w', c.get('peak_reserved_mib') or r.get('peak_reserved_mib'), r['seconds'], c.get('num_fence_records'), c.get('num_fence_waits')))"
}
for v in "base:" "tick4:-DFENCE_TICK=4" "harvest:-DFENCED_FIT_HARVEST=1" "spare0:-DFENCED_FIT_SPARE=0"; do
  name=${v%%:*}; flags=${v#*:}
  meson setup build-$name --buildtype=release -Dtests=false -Dc_args="$flags" >/dev/null 2>&1 && ninja -C build-$name preload/libccinterpose.so >/dev/null 2>&1 || { echo "build $name failed"; continue; }
done
for rep in 1 2 3; do
  for w in encoder resnet; do
    [ $rep = 1 ] && run native $w
    [ $rep = 1 ] && run immediate $w PYTORCH_NO_CUDA_MEMORY_CACHING=1 LD_PRELOAD=$PWD/build-base/preload/libccinterpose.so CCI_ALLOC_CONF=immediate_reuse:True CCI_REPORT=off
    for name in base tick4 harvest spare0; do
      run $name $w PYTORCH_NO_CUDA_MEMORY_CACHING=1 LD_PRELOAD=$PWD/build-$name/preload/libccinterpose.so CCI_REPORT=off
    done
  done
done

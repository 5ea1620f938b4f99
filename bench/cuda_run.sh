#!/bin/bash
# Runs a GPU bundle on the GPU machine with the runtime-only TVM that bench/cuda_carry.sh packed:
#   bash bench/cuda_run.sh DIR BUNDLE OUT [bench/cuda_replay.py arguments]
# DIR holds tvm_site.tgz, the apache-tvm-ffi wheel and the bundle folder BUNDLE; the results go
# to OUT/BUNDLE (bench_cuda_replay.json and the log). The log's per-peer lines ("  name: loading
# peer") name the module a crash happened in; stdout leaves them out.
set -o pipefail
dir=$1; bundle=$2; out=$3; shift 3
mkdir -p /tmp/tvm_site "$out/$bundle"
tar -C /tmp/tvm_site -xzf "$dir/tvm_site.tgz" || exit 3
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/tvm_site/site "$dir"/apache_tvm_ffi-*.whl || exit 3
export PYTHONPATH=/tmp/tvm_site/site TVM_USE_RUNTIME_LIB=1 PYTHONUNBUFFERED=1
cudart=$(find /usr/local /opt -name 'libcudart.so.13*' 2>/dev/null | head -1)
[ -n "$cudart" ] && export LD_LIBRARY_PATH=$(dirname "$cudart"):${LD_LIBRARY_PATH:-}
python3 -X faulthandler "$(dirname "$0")/cuda_replay.py" "$dir/$bundle" "$out/$bundle" "$@" 2>&1 \
    | tee "$out/$bundle/replay_log.txt" | grep -v "^  "

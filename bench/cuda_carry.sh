#!/bin/bash
# Prepares a folder to carry to a GPU machine that has Python, numpy and PyTorch but no TVM:
# TVM's Python package without its compiler library (a runtime-only TVM: libtvm_runtime*.so and
# the Python sources, ~4 MB compressed) and apache-tvm-ffi's wheel for that machine's Python.
#   bash bench/cuda_carry.sh DIR [PYTHON_VERSION]      # e.g. DIR=.gpu, PYTHON_VERSION=3.12
# Then build the bundle into DIR (tests/gpu_bundle.py DIR/BUNDLE --arch sm_90 --bench) and run,
# there, from the repository root: bash bench/cuda_run.sh DIR BUNDLE OUT [cuda_replay args].
set -euo pipefail
dir=$1; py=${2:-3.12}
site=$(.venv/bin/python -c "import tvm, os; print(os.path.dirname(os.path.dirname(tvm.__file__)))")
ffi=$(.venv/bin/python -c "import importlib.metadata as m; print(m.version('apache-tvm-ffi'))")
tvm_version=$(.venv/bin/python -c "import importlib.metadata as m; print(m.version('apache-tvm'))")
mkdir -p "$dir/site"
tar -C "$site" --exclude=__pycache__ --exclude=tvm/3rdparty --exclude=tvm/src --exclude=tvm/include \
    --exclude=tvm/lib/libtvm_compiler.so -cf - tvm "apache_tvm-${tvm_version}.dist-info" | tar -C "$dir/site" -xf -
tar -C "$dir" -czf "$dir/tvm_site.tgz" site && rm -rf "$dir/site"
.venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version "$py" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d "$dir" "apache-tvm-ffi==${ffi}"
ls -la "$dir"

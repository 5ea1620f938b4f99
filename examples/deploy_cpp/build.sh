#!/usr/bin/env sh
# Build the C++ deployment example against the headers and libraries in the Python wheels.
#
#   examples/deploy_cpp/build.sh [OUTPUT_BINARY]        (default: examples/deploy_cpp/deploy)
#
# PYTHON selects the interpreter whose site-packages hold apache-tvm and apache-tvm-ffi
# (default: python3). CXX selects the compiler (default: g++). The binary records the wheel's
# library folders as its rpath, so it runs without LD_LIBRARY_PATH.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-"$here/deploy"}
PYTHON=${PYTHON:-python3}
CXX=${CXX:-g++}

# Paths only: runtime-only TVM (no compiler library needed to build or run).
eval "$(TVM_USE_RUNTIME_LIB=1 "$PYTHON" - <<'PY'
import os, shlex
import tvm_ffi.libinfo as ffi_info
import tvm.libinfo as tvm_info
runtime = tvm_info.find_libtvm_runtime()
ffi_lib = ffi_info.find_libtvm_ffi()
print("FFI_INCLUDE=" + shlex.quote(ffi_info.find_include_path()))
print("DLPACK_INCLUDE=" + shlex.quote(ffi_info.find_dlpack_include_path()))
print("TVM_LIBDIR=" + shlex.quote(os.path.dirname(runtime)))
print("FFI_LIBDIR=" + shlex.quote(os.path.dirname(ffi_lib)))
PY
)"

set -x
"$CXX" -std=c++17 -O2 -o "$out" "$here/deploy.cc" \
  -I"$FFI_INCLUDE" -I"$DLPACK_INCLUDE" \
  -L"$TVM_LIBDIR" -L"$FFI_LIBDIR" -ltvm_runtime -ltvm_ffi \
  -Wl,-rpath,"$TVM_LIBDIR" -Wl,-rpath,"$FFI_LIBDIR" -ldl -pthread

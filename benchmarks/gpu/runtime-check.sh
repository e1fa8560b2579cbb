#!/usr/bin/env bash
# GPU check: a kernel including <cuda_runtime.h> compiled through kcache
# (miss, then hit; the toolkit's crt/ spellings handed over, lib/compile/hermetic.c),
# loaded and run, its results against CuPy's own compile of the same source.
# benchmarks/gpu/stage.sh --no-asan here first; then, on the GPU machine:
#   benchmarks/gpu/runtime-check.sh    (results/h200-runtime.txt)
cd "$(dirname "$0")/../.."
export LD_LIBRARY_PATH=$PWD/.dev/gpu/lib
export KCACHE_DIR=$(mktemp -d)
K=.dev/gpu/bin/kcache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ls -d /usr/local/cuda*/include/crt 2>/dev/null | head -2
W=$(mktemp -d)
cat > $W/rt.cu <<'CU'
#include <cuda_runtime.h>
#include <cuda_fp16.h>
extern "C" __global__ void rt(const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        __half h = __float2half(x[i]);
        y[i] = sinf(x[i]) * __half2float(__hmul(h, h)) + rsqrtf(1.0f + x[i] * x[i]);
    }
}
CU
for run in miss hit; do
  $K compile $W/rt.cu --arch sm_90 -o $W/rt.cubin -- -I/usr/local/cuda/include 2>&1 | tail -2
done
$K stats 2>&1 | grep -E "Hits|Not cacheable|sm_90" | head -5
key=$($K ls --json 2>/dev/null | python3 -c "import json,sys; d=json.load(sys.stdin); e=d if isinstance(d,list) else d.get('entries',d.get('items',[])); print(e[0]['key'])" 2>/dev/null)
echo "key: $key"
$K inspect ${key:0:12} 2>&1 | grep -E "toolkit-handed|toolkit-include-dir|format" | head -8
python3 - "$W" <<'PY'
import sys, numpy as np, cupy as cp
w = sys.argv[1]
src = open(w + "/rt.cu").read()
n = 1 << 16
x = cp.linspace(-4, 4, n, dtype=cp.float32)
ours = cp.RawModule(path=w + "/rt.cubin").get_function("rt")
theirs = cp.RawModule(code=src, options=("-I/usr/local/cuda/include",)).get_function("rt")
y1 = cp.empty_like(x); y2 = cp.empty_like(x)
ours(((n + 255) // 256,), (256,), (x, y1, cp.int32(n)))
theirs(((n + 255) // 256,), (256,), (x, y2, cp.int32(n)))
print("kcache cubin vs CuPy's compile: identical results:", bool(cp.array_equal(y1, y2)),
      "max |diff|", float(cp.abs(y1 - y2).max()))
PY

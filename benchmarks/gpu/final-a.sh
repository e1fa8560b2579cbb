#!/usr/bin/env bash
# The closing batch, part one, on the GPU machine (from the repository root,
# .dev/gpu staged and carried): CuPy's workload, the drop-in checks, the
# program's own NVRTC. Each writes its table to $OUT.
set -u
export PATH=/opt/torch/.venv/bin:$PATH LD_LIBRARY_PATH=$PWD/.dev/gpu/lib PYTHONUNBUFFERED=1
k=.dev/gpu/bin/kcache
out=${OUT:-.dev/gpu/out}; mkdir -p "$out"
python3 benchmarks/gpu/cupy_workload.py --kcache $k --runs ${CUPY_RUNS:-2} 2>&1 | tee "$out/cupy-workload.txt"
python3 benchmarks/gpu/dropin/dropin.py --kcache $k --runs 3 2>&1 | tee "$out/dropin.txt"
python3 benchmarks/gpu/own_nvrtc.py --kcache $k 2>&1 | tee "$out/own-nvrtc.txt"

#!/usr/bin/env bash
# The closing batch, part two: Triton and torch.compile (the wheel in .whl),
# then the long soundness harness, 15 instances of SECONDS (default 90).
set -u
export PATH=/opt/torch/.venv/bin:$PATH PYTHONUNBUFFERED=1
out=${OUT:-.dev/gpu/out}; mkdir -p "$out"
OUT=/tmp/triton benchmarks/triton/gpu-batch.sh > /tmp/triton.log 2>&1
cp /tmp/triton/gpu_check.txt "$out/triton.txt" 2>/dev/null || cp /tmp/triton.log "$out/triton.txt"
cp /tmp/triton/gpu_check.json "$out/triton.json" 2>/dev/null
cp /tmp/triton/warm_pairs.txt "$out/triton-warm-pairs.txt" 2>/dev/null
tail -30 "$out/triton.txt"
export LD_LIBRARY_PATH=$PWD/.dev/gpu/lib
tests/soundness/soak.sh .dev/gpu/bin/kcache .dev/gpu/bin/soundness-driver \
    .dev/gpu/lib/nvrtc-shim/libnvrtc.so.13 15 "${SOAK_SECONDS:-90}" /tmp/soak > /tmp/soak.txt 2>&1
cat /tmp/soak.txt | tee "$out/soak.txt" | tail -30
grep -h "steps per class" -A40 /tmp/soak/h1.log > "$out/soak-h1-classes.txt" 2>/dev/null

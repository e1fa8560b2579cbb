#!/usr/bin/env python3
"""Compiles Triton kernels for a GPU target (no GPU needed) and prints what happened as JSON.

usage: tt_compile.py [--arch 90] [--blocks 16,32,...] [--warps 4,...] [--wait-until T] [--repeat N]

One kernel per block size (the constexpr BLOCK, a power of 2) and number of
warps; each is named "BLOCKwWARPS" in the output. Triton's compilation
listener says whether each compile was a cache hit; the output has, per
kernel, Triton's hash, whether it was a hit, the target in its metadata, and
the SHA-256 of its CUBIN; and kcache.triton's counters when that is the
cache manager. --wait-until sleeps to a wall-clock time first, so that many
processes start compiling at once. --repeat compiles the list N times and
adds per-round timings (seconds) for the benchmarks.
"""
import argparse
import hashlib
import json
import os
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", type=int, default=90)
    ap.add_argument("--blocks", default="64")
    ap.add_argument("--warps", default="4")
    ap.add_argument("--wait-until", type=float, default=0.0)
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()

    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    import triton
    import triton.language as tl
    from triton import knobs
    from triton.backends.compiler import GPUTarget

    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        x = tl.load(x_ptr + offs, mask=m)
        y = tl.load(y_ptr + offs, mask=m)
        tl.store(out_ptr + offs, x * 2.0 + y, mask=m)

    hits = []

    def listener(src, metadata, metadata_group, times, cache_hit):
        hits.append(bool(cache_hit))

    knobs.compilation.listener = listener
    target = GPUTarget("cuda", a.arch, 32)
    sig = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}
    blocks = [(int(b), int(w)) for b in a.blocks.split(",") if b
              for w in a.warps.split(",") if w]
    if a.wait_until:
        time.sleep(max(0.0, a.wait_until - time.time()))
    rounds = []
    kernels = []
    for r in range(a.repeat):
        del hits[:]
        t0 = time.perf_counter()
        out = []
        for b, w in blocks:
            k = triton.compile(triton.compiler.ASTSource(fn=add_kernel, signature=sig,
                                                         constexprs={"BLOCK": b}),
                               target=target, options={"num_warps": w})
            out.append(k)
        rounds.append(time.perf_counter() - t0)
        kernels = [{
            "id": "%dw%d" % b,
            "hash": k.hash,
            "hit": hits[i],
            "arch": k.metadata.target.arch,
            "cubin_sha256": hashlib.sha256(k.asm["cubin"]).hexdigest(),
            "asm": sorted(k.asm.keys()),
            "group": sorted(k.metadata_group),
            "paths": sorted(k.metadata_group.values()),
        } for i, (b, k) in enumerate(zip(blocks, out))]
    result = {"kernels": kernels, "rounds": rounds, "pid": os.getpid()}
    if os.environ.get("TRITON_CACHE_MANAGER", "").startswith("kcache.triton"):
        import kcache.triton as kt

        result["kcache"] = kt.stats()
        result["staging"] = kt.staging_dir()
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()

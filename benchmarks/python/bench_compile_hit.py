#!/usr/bin/env python3
"""kcache.compile on a real header tree: a cold compile, warm hits, a fresh process's hit.

usage: bench_compile_hit.py [--source FILE] [--arch sm_90] [--cold N] [--warm N]
                            [--fresh P] [--workdir DIR] [--json FILE]

The default source is examples/block_sort.cu: CUB's block radix sort and scan
in three instantiations, reading several hundred CCCL headers from
<toolkit>/include/cccl (-std=c++17). In one run, in a cache of its own:

- cold: N compiles with refresh=True (NVRTC runs, the entry is stored anew);
- warm: N hits in this process (the compiler and its store already open);
- fresh: P new processes, each timing `import kcache` and its first
  kcache.compile() (a hit) apart.

Every hit is checked: hit=True and the same CUBIN as the cold compile.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

CHILD = r'''
import sys, time
t0 = time.perf_counter()
import kcache
t1 = time.perf_counter()
r = kcache.compile(path=sys.argv[1], arch=sys.argv[2], options=["-std=c++17"],
                   include_paths=[sys.argv[3]], cache=sys.argv[4])
t2 = time.perf_counter()
assert r.hit, r
print((t1 - t0) * 1e6, (t2 - t1) * 1e6, r.key)
'''


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", default=os.path.join(here, "..", "..", "examples", "block_sort.cu"))
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--toolkit", default=os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    ap.add_argument("--cold", type=int, default=3)
    ap.add_argument("--warm", type=int, default=30)
    ap.add_argument("--fresh", type=int, default=15)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()

    import kcache

    src = os.path.abspath(a.source)
    cccl = os.path.join(a.toolkit, "include", "cccl")
    work = tempfile.mkdtemp(prefix="kcache-bench-compile-", dir=a.workdir)
    try:
        kw = dict(path=src, arch=a.arch, options=["-std=c++17"], include_paths=[cccl], cache=work)
        cold = []
        for _ in range(a.cold):
            t0 = time.perf_counter()
            r = kcache.compile(refresh=True, **kw)
            cold.append(time.perf_counter() - t0)
            assert not r.hit and r.key, r
        cubin, key = r.data, r.key
        warm = []
        for _ in range(a.warm):
            t0 = time.perf_counter()
            r = kcache.compile(**kw)
            warm.append(time.perf_counter() - t0)
            assert r.hit and r.data == cubin, r
        imports, fresh = [], []
        for _ in range(a.fresh):
            p = subprocess.run([sys.executable, "-c", CHILD, src, a.arch, cccl, work],
                               capture_output=True, text=True, timeout=300)
            if p.returncode:
                sys.exit("child failed: " + p.stderr)
            imp, hit, k = p.stdout.split()
            assert k == key, (k, key)
            imports.append(float(imp))
            fresh.append(float(hit))
        row = {
            "source": os.path.relpath(src, os.path.join(here, "..", "..")),
            "arch": a.arch,
            "cubin_bytes": len(cubin),
            "cold_median_ms": statistics.median(cold) * 1e3,
            "cold_runs": len(cold),
            "warm_median_us": statistics.median(warm) * 1e6,
            "warm_runs": len(warm),
            "fresh_hit_median_us": statistics.median(fresh),
            "fresh_import_median_us": statistics.median(imports),
            "fresh_processes": len(fresh),
        }
        print("kcache.compile(%s, arch=%s, -std=c++17, -I %s): CUBIN %d bytes"
              % (row["source"], a.arch, cccl, len(cubin)))
        print("  cold compile (refresh=True), median of %d: %.1f ms" % (len(cold), row["cold_median_ms"]))
        print("  warm hit in-process, median of %d: %.1f us" % (len(warm), row["warm_median_us"]))
        print("  fresh process's hit, median of %d: %.1f us (import kcache: %.1f us more)"
              % (len(fresh), row["fresh_hit_median_us"], row["fresh_import_median_us"]))
        if a.json:
            with open(a.json, "w") as f:
                json.dump(row, f, indent=2)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

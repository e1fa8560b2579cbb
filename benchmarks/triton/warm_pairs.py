#!/usr/bin/env python3
"""A warm Triton program, Triton's file cache and kcache run in turns (GPU machine).

usage: warm_pairs.py [--kernels N] [--pairs N]

gpu_check.py runs each system's warm process once, one system after the other;
on the H200 its "first use of all kernels" moved by 100 ms from one process to
the next, more than the difference it was meant to show. This script runs a
cold process for each system, then N pairs of warm processes, file cache and
kcache in turns, and prints each process's wall time for the 20 first launches
(gpu_check.child_triton), the median launch, the time spent inside kcache's
CacheManager (get_group and get_file, timed in the program) and in Python's
garbage collector, then the medians. Needs torch, triton and the kcache module
(benchmarks/triton/gpu-batch.sh shows how to install the wheel there).
"""
import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.abspath(__file__)
sys.path.insert(0, os.path.dirname(HERE))


def child(kernels):
    import gpu_check
    import torch

    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    inside = []
    try:
        import kcache.triton as kt

        if os.environ.get("TRITON_CACHE_MANAGER", "").startswith("kcache"):
            for name in ("get_group", "get_file"):
                f = getattr(kt.CacheManager, name)

                def timed(*a, _f=f, **k):
                    t = time.perf_counter()
                    try:
                        return _f(*a, **k)
                    finally:
                        inside.append(time.perf_counter() - t)

                setattr(kt.CacheManager, name, timed)
    except ImportError:
        pass
    in_gc, start = [], [0.0]

    def gc_cb(phase, info):
        if phase == "start":
            start[0] = time.perf_counter()
        else:
            in_gc.append(time.perf_counter() - start[0])

    gc.callbacks.append(gc_cb)
    r = gpu_check.child_triton(kernels)
    gc.callbacks.remove(gc_cb)
    r.update(kcache_s=sum(inside), gc_s=sum(in_gc))
    json.dump(r, sys.stdout)


def median(v):
    v = sorted(v)
    return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kernels", type=int, default=20)
    ap.add_argument("--pairs", type=int, default=7)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a.kernels)
    tmp = tempfile.mkdtemp(prefix="kcache-warm-pairs-")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("KCACHE_", "TRITON_"))}
    walls = {"file": [], "kcache": []}
    ref = None
    plan = [(s, "cold") for s in walls] + [(s, "warm") for _ in range(a.pairs) for s in walls]
    for system, run in plan:
        d = os.path.join(tmp, system)
        env = dict(base, TRITON_CACHE_DIR=os.path.join(d, "triton"))
        os.makedirs(env["TRITON_CACHE_DIR"], exist_ok=True)
        if system == "kcache":
            env.update(TRITON_CACHE_MANAGER="kcache.triton:CacheManager",
                       KCACHE_DIR=os.path.join(d, "kcache"))
        p = subprocess.run([sys.executable, HERE, "--child", "--kernels", str(a.kernels)],
                           env=env, capture_output=True, text=True, timeout=900)
        if p.returncode:
            print(p.stderr[-3000:], file=sys.stderr)
            print("%s %s: exit %d" % (system, run, p.returncode))
            return 1
        r = json.loads(p.stdout)
        ref = ref or r["digests"]
        same = "same" if r["digests"] == ref else "DIFFERENT"
        print("%-6s %-4s  wall %.3f s  launch median %.2f ms  in kcache %.1f ms  in gc %.1f ms  "
              "compiles %s  %s" % (system, run, r["wall_s"], r["launch_median_s"] * 1e3,
                                   r["kcache_s"] * 1e3, r["gc_s"] * 1e3, r["compiles"], same),
              flush=True)
        if run == "warm":
            walls[system].append(r["wall_s"])
        if same != "same" or (run == "warm" and r["compiles"]):
            return 1
    f, k = median(walls["file"]), median(walls["kcache"])
    print("warm wall, median of %d: Triton's file cache %.3f s, kcache %.3f s (%.3fx)"
          % (a.pairs, f, k, k / f))
    return 0


if __name__ == "__main__":
    sys.exit(main())

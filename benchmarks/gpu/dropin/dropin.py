#!/usr/bin/env python3
"""The drop-in NVRTC on a GPU machine: CuPy and cuda.core under
`kcache run`, unchanged.

    python3 benchmarks/gpu/dropin/dropin.py [--kcache build/cli/kcache] [--runs 5]
                                            [--cuda /usr/local/cuda] [--json out.json]

Needs a GPU, CuPy 14 (cupy-cuda13x) and cuda.core in the Python that runs it,
and a built kcache (meson setup build && ninja -C build). Each check and each
timed run is a fresh process:

  1. CuPy RawKernel and RawModule (name expressions), CuPy's own disk cache off
     (CUPY_CACHE_IN_MEMORY=1), under `kcache run`: the first process misses,
     the second hits every compile (CuPy's own elementwise kernels included),
     and the results are correct.
  2. cuda.core Program.compile (no cache=), twice: the second process hits.
  3. Hot start of a CuPy program that compiles a CUB block sort (block_sort_dropin.cu)
     and launches it: no cache at all, CuPy's own cache warm, the drop-in warm
     (CuPy's cache off). Median wall time from spawn to the launch completed.
  4. A header edit: a kernel that includes a header through -I, run, the header
     edited, run again: the drop-in gives the new value; CuPy's own cache is
     shown for comparison.

Prints a short table; --json writes the numbers. Exit 77 without a GPU or
without CuPy, 1 when a check fails.
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

HERE = os.path.dirname(os.path.abspath(__file__))
# The drop-in's report has one reader, beside its tests.
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "tests", "nvrtc-shim"))
from shim_report import read_report  # noqa: E402
EXPR = "sort_then_scan<128, 4>"
BLOCK, ITEMS, BLOCKS = 128, 4, 64

SAXPY = r'''
extern "C" __global__ void saxpy(float a, const float *x, float *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + y[i];
}
'''
TEMPLATE = r'''
template <typename T, int N> __global__ void scale(T *p, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] *= N;
}
'''
HEADER_KERNEL = r'''
#include "dropin_value.h"
extern "C" __global__ void value(int *out) { out[threadIdx.x] = DROPIN_VALUE; }
'''


# ---- children: one fresh process each ------------------------------------

def child_cupy_basic():
    import cupy as cp
    n = 1 << 16
    x = cp.arange(n, dtype=cp.float32)
    y = cp.ones(n, dtype=cp.float32)
    k = cp.RawKernel(SAXPY, "saxpy")
    k(((n + 255) // 256,), (256,), (cp.float32(2.0), x, y, cp.int32(n)))
    ok = bool(cp.allclose(y, 2 * x + 1))
    mod = cp.RawModule(code=TEMPLATE, options=("-std=c++17",),
                       name_expressions=("scale<float, 3>", "scale<int, 5>"))
    f = cp.arange(n, dtype=cp.float32)
    i = cp.arange(n, dtype=cp.int32)
    mod.get_function("scale<float, 3>")(((n + 255) // 256,), (256,), (f, cp.int32(n)))
    mod.get_function("scale<int, 5>")(((n + 255) // 256,), (256,), (i, cp.int32(n)))
    ok = ok and bool(cp.allclose(f, 3 * cp.arange(n, dtype=cp.float32)))
    ok = ok and bool((i == 5 * cp.arange(n, dtype=cp.int32)).all())
    print(json.dumps({"correct": ok, "cupy": cp.__version__}))
    return 0 if ok else 1


def core():
    try:
        import cuda.core as cc
        if hasattr(cc, "Program"):
            return cc
    except ImportError:
        pass
    import cuda.core.experimental as cc
    return cc


def child_cudacore():
    cc = core()
    dev = cc.Device()
    dev.set_current()
    arch = "sm_%d%d" % tuple(dev.compute_capability)
    prog = cc.Program(TEMPLATE, code_type="c++",
                      options=cc.ProgramOptions(arch=arch, std="c++17"))
    mod = prog.compile("cubin", name_expressions=("scale<float, 3>",))
    mod.get_kernel("scale<float, 3>")  # loads the CUBIN: the driver checks it
    print(json.dumps({"correct": True, "arch": arch}))
    return 0


def sort_keys(np):
    i = np.arange(BLOCKS * BLOCK * ITEMS, dtype=np.uint64)
    return (((i * 2654435761) & 0xFFFFFFFF) % 200001 - 100000).astype(np.int32)


def child_cupy_sort(t_main, cccl):
    import numpy as np
    import cupy as cp
    with open(os.path.join(HERE, "block_sort_dropin.cu")) as f:
        code = f.read()
    mod = cp.RawModule(code=code, options=("-std=c++17", "-I" + cccl),
                       name_expressions=(EXPR,))
    kernel = mod.get_function(EXPR)
    host = sort_keys(np)
    din = cp.asarray(host)
    dout = cp.empty_like(din)
    kernel((BLOCKS,), (BLOCK,), (din, dout))
    cp.cuda.Device().synchronize()
    t_done = time.monotonic_ns()
    t = np.sort(host.astype(np.int64).reshape(BLOCKS, BLOCK * ITEMS), axis=1)
    want = (np.cumsum(t, axis=1) - t).reshape(-1).astype(np.int32)
    ok = bool((cp.asnumpy(dout) == want).all())
    print(json.dumps({"main_ns": t_main, "done_ns": t_done, "correct": ok}))
    return 0 if ok else 1


def child_cupy_header(inc):
    import cupy as cp
    k = cp.RawKernel(HEADER_KERNEL, "value", options=("-I" + inc,))
    out = cp.zeros(32, dtype=cp.int32)
    k((1,), (32,), (out,))
    print(json.dumps({"value": int(out[0].get())}))
    return 0


# ---- the parent ----------------------------------------------------------

class Failed(Exception):
    pass


def spawn(argv, env):
    t0 = time.monotonic_ns()
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        raise Failed("%s exited %d: %s" % (" ".join(argv[-3:]), p.returncode,
                                           (p.stderr or p.stdout).strip()[-1500:]))
    rec = json.loads(lines[-1])
    rec["spawn_ns"] = t0
    return rec



def totals(rows):
    """Hits, misses, and compiles that went to NVIDIA's library uncached (any reason)."""
    t = {k: sum(r.get(k, 0) for r in rows) for k in ("hits", "misses")}
    t["uncached"] = sum(v for r in rows for k, v in r.items()
                        if k not in ("pid", "hits", "misses") and isinstance(v, int))
    return t


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kcache", default=os.path.join(HERE, "..", "..", "..", "build", "cli",
                                                     "kcache"))
    ap.add_argument("--cuda", default=os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        mode = args.child[0]
        if mode == "cupy-basic":
            return child_cupy_basic()
        if mode == "cudacore":
            return child_cudacore()
        if mode == "cupy-sort":
            return child_cupy_sort(int(args.child[1]), args.child[2])
        if mode == "cupy-header":
            return child_cupy_header(args.child[1])
        return 2

    kcache = os.path.abspath(args.kcache)
    cccl = os.path.join(args.cuda, "include", "cccl")
    if not os.access(kcache, os.X_OK):
        print("dropin: no kcache at %s: build it (meson setup build && ninja -C build) or "
              "pass --kcache" % kcache, file=sys.stderr)
        return 1
    probe = subprocess.run([sys.executable, "-c",
                            "import cupy; cupy.cuda.runtime.getDeviceCount(); "
                            "print(cupy.__version__)"], capture_output=True, text=True)
    if probe.returncode != 0:
        print("dropin: SKIP: no CuPy or no GPU here: %s" % probe.stderr.strip()[-300:],
              file=sys.stderr)
        return 77
    me = [sys.executable, os.path.abspath(__file__), "--child"]
    work = tempfile.mkdtemp(prefix="kcache-dropin-")
    base = dict(os.environ)
    for k in ("KCACHE_PATH", "KCACHE_DISABLE", "CUPY_CACHE_DIR", "CUPY_CACHE_IN_MEMORY",
              "LD_PRELOAD"):
        base.pop(k, None)
    report = os.path.join(work, "report")
    results = {"cupy": probe.stdout.strip(), "checks": [], "hotstart": []}
    failures = []

    def check(ok, what):
        results["checks"].append({"check": what, "ok": bool(ok)})
        print(("ok   " if ok else "FAIL ") + what, flush=True)
        if not ok:
            failures.append(what)

    def dropin_env(cache, **extra):
        env = dict(base, KCACHE_DIR=cache, KCACHE_NVRTC_REPORT=report, CUPY_CACHE_IN_MEMORY="1")
        env.update(extra)
        return env

    run = [kcache, "run", "--"]
    try:
        # 1. CuPy RawKernel / RawModule, CuPy's cache off, under kcache run.
        cache = os.path.join(work, "k-basic")
        first = spawn(run + me + ["cupy-basic"], dropin_env(cache))
        r1 = totals(read_report(report))
        second = spawn(run + me + ["cupy-basic"], dropin_env(cache))
        r2 = totals(read_report(report))
        check(first["correct"] and second["correct"], "CuPy RawKernel/RawModule: results correct")
        check(r1["misses"] >= 2, "CuPy, first process: compiles miss (%s)" % r1)
        check(r2["hits"] >= 2 and r2["misses"] == 0 and r2["uncached"] == 0,
              "CuPy, second process: every compile hits (%s)" % r2)

        # 2. cuda.core Program.compile, no cache= argument.
        cache = os.path.join(work, "k-core")
        try:
            spawn(run + me + ["cudacore"], dropin_env(cache))
            c1 = totals(read_report(report))
            spawn(run + me + ["cudacore"], dropin_env(cache))
            c2 = totals(read_report(report))
            check(c1["misses"] >= 1 and c2["hits"] >= 1 and c2["misses"] == 0,
                  "cuda.core Program.compile: first misses %s, second hits %s" % (c1, c2))
        except Failed as e:
            check(False, "cuda.core Program.compile: %s" % e)

        # 3. Hot start of a CuPy program compiling a CUB block sort.
        def timed(name, argv_prefix, env_of, prime):
            if prime:
                spawn(argv_prefix + me + ["cupy-sort", "0", cccl], env_of())
            read_report(report)
            ms, ok = [], True
            for _ in range(args.runs):
                rec = spawn(argv_prefix + me + ["cupy-sort", str(time.monotonic_ns()), cccl],
                            env_of())
                ms.append((rec["done_ns"] - rec["spawn_ns"]) / 1e6)
                ok = ok and rec["correct"]
            row = {"row": name, "median_ms": statistics.median(ms), "min_ms": min(ms),
                   "max_ms": max(ms), "runs": len(ms), "correct": ok,
                   "dropin": totals(read_report(report))}
            results["hotstart"].append(row)
            check(ok, "hot start, %s: results correct" % name)
            return row

        timed("no cache (CUPY_CACHE_IN_MEMORY=1)", [],
              lambda: dict(base, CUPY_CACHE_IN_MEMORY="1"), False)
        cupy_dir = os.path.join(work, "cupy-cache")
        cupy_row = timed("CuPy's own cache, warm", [],
                         lambda: dict(base, CUPY_CACHE_DIR=cupy_dir), True)
        k_sort = os.path.join(work, "k-sort")
        drop_row = timed("kcache drop-in, warm (CuPy's cache off)", run,
                         lambda: dropin_env(k_sort), True)
        # Each process compiles the sort itself and CuPy's probe of the options
        # (an empty program): a hit each, and nothing past the cache.
        check(drop_row["dropin"]["misses"] == 0 and drop_row["dropin"]["uncached"] == 0 and
              drop_row["dropin"]["hits"] >= 2 * args.runs,
              "hot start, drop-in warm: every compile a hit (%s)" % drop_row["dropin"])
        results["goal_met"] = drop_row["median_ms"] <= cupy_row["median_ms"]

        # 4. A header edit is never stale.
        inc = os.path.join(work, "inc")
        os.makedirs(inc)
        hdr = os.path.join(inc, "dropin_value.h")
        seen = {}
        for name, prefix, env_of in (
                ("kcache drop-in", run, lambda: dropin_env(os.path.join(work, "k-hdr"))),
                ("CuPy's own cache", [],
                 lambda: dict(base, CUPY_CACHE_DIR=os.path.join(work, "cupy-hdr")))):
            with open(hdr, "w") as f:
                f.write("#define DROPIN_VALUE 1\n")
            before = spawn(prefix + me + ["cupy-header", inc], env_of())["value"]
            with open(hdr, "w") as f:
                f.write("#define DROPIN_VALUE 2\n")
            after = spawn(prefix + me + ["cupy-header", inc], env_of())["value"]
            read_report(report)
            seen[name] = (before, after)
        results["header_edit"] = seen
        check(seen["kcache drop-in"] == (1, 2),
              "header edit: the drop-in gives the new value %s" % (seen["kcache drop-in"],))
    except Failed as e:
        check(False, str(e))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print()
    print("%-42s %10s %10s %10s  %s" % ("hot start (block sort, fresh process)", "median ms",
                                         "min ms", "max ms", "drop-in hits/misses/uncached"))
    for row in results["hotstart"]:
        print("%-42s %10.1f %10.1f %10.1f  %s" % (row["row"], row["median_ms"], row["min_ms"],
                                                   row["max_ms"],
                                                   "%d/%d/%d" % (row["dropin"]["hits"],
                                                                 row["dropin"]["misses"],
                                                                 row["dropin"]["uncached"])))
    for name, (before, after) in results.get("header_edit", {}).items():
        print("%-42s value %d -> %d after the edit: %s" % (
            "header edit, " + name, before, after, "fresh" if after == 2 else "STALE"))
    if "goal_met" in results:
        print("goal (drop-in warm <= CuPy's cache warm): %s" % ("met" if results["goal_met"]
                                                                else "NOT met"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""CuPy's own workload under `kcache run` against CuPy alone: 200+ compiles.

    python3 benchmarks/gpu/cupy_workload.py --kcache K [--runs 3] [--json out.json]

The workload is what a CuPy program compiles as it runs: elementwise ufuncs
and reductions over every dtype (each (operation, dtype) pair one NVRTC
compile of a kernel that includes CuPy's header tree). Each row is a fresh
process, with NVIDIA's driver cache off (CUDA_CACHE_DISABLE=1):

  plain cold       CuPy alone, an empty CuPy cache directory
  plain warm       CuPy alone, its cache directory from the cold run
  kcache cold      under kcache run, an empty kcache and an empty CuPy directory
  kcache warm      the same kcache, a NEW empty CuPy directory (a new container,
                   a fresh CUPY_CACHE_DIR: CuPy names each program
                   <a temporary directory>/kern.cu, so this row shows whether
                   the program's name is keyed)
and the same two kcache rows with CuPy's disk cache off (CUPY_CACHE_IN_MEMORY=1).
Cold rows alternate plain / kcache, --runs times each; the table gives
medians, the ratio kcache cold / plain cold, hits and misses from the
drop-in's report, and the bytes on disk: kcache's database against CuPy's
cache directory.

Exit 77 without CuPy or a GPU; 1 when a warm kcache process missed.
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
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "nvrtc-shim"))
from shim_report import read_report  # noqa: E402


def child():
    import cupy as cp
    t0 = time.perf_counter()
    dtypes = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
              "float16", "float32", "float64", "complex64", "complex128"]
    unary = ["sin", "cos", "exp", "log", "sqrt", "absolute", "negative", "square", "tanh",
             "floor", "sign", "reciprocal"]
    binary = ["add", "subtract", "multiply", "maximum", "minimum", "power", "true_divide",
              "fmod"]
    reductions = ["sum", "max", "min", "prod"]
    done = skipped = 0
    check = 0.0
    for name in dtypes:
        a = cp.arange(1, 65, dtype=name).reshape(8, 8)
        for op in unary + binary:
            f = getattr(cp, op)
            try:
                r = f(a) if op in unary else f(a, a)
            except (TypeError, ValueError):
                skipped += 1
                continue
            check += float(cp.abs(r.astype(cp.complex128)).sum().get().real)
            done += 1
        for op in reductions:
            try:
                r = getattr(a, op)(axis=1)
            except (TypeError, ValueError):
                skipped += 1
                continue
            check += float(cp.abs(r.astype(cp.complex128)).sum().get().real)
            done += 1
    cp.cuda.Device().synchronize()
    print(json.dumps({"ops": done, "skipped": skipped, "check": check,
                      "work_s": time.perf_counter() - t0}))
    return 0


def du(path):
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kcache")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child()
    if not args.kcache:
        ap.error("--kcache is required")
    probe = subprocess.run([sys.executable, "-c", "import cupy; cupy.cuda.runtime.getDeviceCount()"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        print("cupy_workload: SKIP: no CuPy or no GPU: %s" % probe.stderr.strip()[-300:])
        return 77
    kcache = os.path.abspath(args.kcache)
    work = tempfile.mkdtemp(prefix="kcache-cupy-")
    report = os.path.join(work, "report")
    base = {k: v for k, v in os.environ.items()
            if k not in ("KCACHE_PATH", "KCACHE_DIR", "KCACHE_DISABLE", "CUPY_CACHE_DIR",
                         "CUPY_CACHE_IN_MEMORY", "LD_PRELOAD")}
    base["CUDA_CACHE_DISABLE"] = "1"
    me = [sys.executable, os.path.abspath(__file__), "--child"]
    rows = {}
    counter = [0]

    def fresh(name):
        counter[0] += 1
        d = os.path.join(work, "%s-%d" % (name, counter[0]))
        os.makedirs(d)
        return d

    def run(row, under_kcache, env):
        argv = ([kcache, "run", "--"] if under_kcache else []) + me
        t0 = time.perf_counter()
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800)
        wall = time.perf_counter() - t0
        out = [l for l in p.stdout.splitlines() if l.startswith("{")]
        if p.returncode != 0 or not out:
            raise SystemExit("cupy_workload: %s exited %d: %s" % (row, p.returncode,
                                                                  p.stderr.strip()[-1500:]))
        rec = json.loads(out[-1])
        rec["wall_s"] = wall
        if under_kcache:
            rep = read_report(report)
            rec["hits"] = sum(r.get("hits", 0) for r in rep)
            rec["misses"] = sum(r.get("misses", 0) for r in rep)
            rec["uncached"] = sum(v for r in rep for k, v in r.items()
                                  if k not in ("pid", "hits", "misses") and isinstance(v, int))
        rows.setdefault(row, []).append(rec)
        print("%-28s %7.2f s  %s" % (row, wall, {k: rec[k] for k in rec
                                                if k in ("ops", "hits", "misses", "uncached")}),
              flush=True)
        return rec

    sizes = {}
    for i in range(args.runs):
        cupy_dir = fresh("cupy")
        run("plain cold", False, dict(base, CUPY_CACHE_DIR=cupy_dir))
        run("plain warm", False, dict(base, CUPY_CACHE_DIR=cupy_dir))
        sizes["cupy cache dir"] = du(cupy_dir)
        kc = fresh("kc")
        env = dict(base, KCACHE_DIR=kc, KCACHE_NVRTC_REPORT=report)
        run("kcache cold", True, dict(env, CUPY_CACHE_DIR=fresh("cupy")))
        run("kcache warm, new CuPy dir", True, dict(env, CUPY_CACHE_DIR=fresh("cupy")))
        sizes["kcache db"] = du(kc)
        kc = fresh("kc")
        env = dict(base, KCACHE_DIR=kc, KCACHE_NVRTC_REPORT=report, CUPY_CACHE_IN_MEMORY="1")
        run("kcache cold, in memory", True, env)
        run("kcache warm, in memory", True, env)
        run("plain cold, in memory", False, dict(base, CUPY_CACHE_IN_MEMORY="1"))

    med = {r: statistics.median(x["wall_s"] for x in v) for r, v in rows.items()}
    work_med = {r: statistics.median(x["work_s"] for x in v) for r, v in rows.items()}
    print("\n%-28s %10s %10s %6s %6s" % ("row (median of %d)" % args.runs, "process s",
                                         "workload s", "hits", "misses"))
    for r in rows:
        last = rows[r][-1]
        print("%-28s %10.2f %10.2f %6s %6s" % (r, med[r], work_med[r], last.get("hits", "-"),
                                              last.get("misses", "-")))
    ratios = {
        "kcache cold / plain cold": med["kcache cold"] / med["plain cold"],
        "kcache cold, in memory / plain cold, in memory":
            med["kcache cold, in memory"] / med["plain cold, in memory"],
        "kcache warm, new CuPy dir / plain warm": med["kcache warm, new CuPy dir"] / med["plain warm"],
        "kcache warm, in memory / plain warm": med["kcache warm, in memory"] / med["plain warm"],
        "kcache db / cupy cache dir": sizes["kcache db"] / max(1, sizes["cupy cache dir"]),
    }
    for k, v in ratios.items():
        print("%-48s %6.2fx" % (k, v))
    print("bytes: kcache db %d, cupy cache dir %d" % (sizes["kcache db"], sizes["cupy cache dir"]))
    warm_missed = [r for r in rows if "warm" in r and "kcache" in r
                   and any(x["misses"] or x["uncached"] for x in rows[r])]
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "medians_s": med, "ratios": ratios, "bytes": sizes}, f,
                      indent=1)
    shutil.rmtree(work, ignore_errors=True)
    if warm_missed:
        print("FAIL: a warm kcache process compiled: %s" % warm_missed)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""NVRTC's own cache as a compared system.

NVRTC 12.9+ keeps compiled programs in the CUDA driver's ComputeCache
(~/.nv/ComputeCache, or $CUDA_CACHE_PATH) unless given --no-cache. This
measures what it costs and saves, each figure in a fresh process, from the
call that creates the program to the CUBIN in hand (the process's start and
Python's import are not counted; loading libnvrtc is, as in a real first
compile):

  NVRTC --no-cache                        what kcache's own compiles pass
  NVRTC's cache, cold                     an empty ComputeCache directory
  NVRTC's cache, warm                     the same compile done once before
  NVRTC's cache, warm, driver started     cuInit + a context first (untimed),
                                          as in a program that already uses the GPU

Without a driver (a CPU-only CI runner) only the first two can run: NVRTC's
cache then stores nothing, and the script says so. kcache's own figures for
the same kernels come from bench_compile in the same session
(benchmarks/gpu/nvrtc-cache-rows.sh runs both).

    python3 benchmarks/gpu/nvrtc_cache.py --cuda /usr/local/cuda \\
        --corpus examples --runs 5 --json nvrtc-cache.json

Writes {"benchmark": "gpu-nvrtc-cache", "rows": [{"variant", "median_ms", ...}]}.
"""
import argparse
import ctypes
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

KERNELS = {
    # file: (options besides -arch, whether it needs CCCL)
    "saxpy.cu": ([], False),
    "block_sort.cu": (["-std=c++17"], True),
}


def child(a):
    """One compile in this process; prints {"ms": ..., "cubin": bytes}."""
    if a.driver_first:
        cuda = ctypes.CDLL("libcuda.so.1")
        ctx = ctypes.c_void_p()
        dev = ctypes.c_int()
        if cuda.cuInit(0) or cuda.cuDeviceGet(ctypes.byref(dev), 0) or \
                cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev):
            print(json.dumps({"error": "no CUDA driver or device"}))
            return 1
    src = open(a.file, "rb").read()
    opts = [("-arch=" + a.arch).encode()] + [o.encode() for o in a.opt]
    if a.no_cache:
        opts.append(b"--no-cache")
    arr = (ctypes.c_char_p * len(opts))(*opts)
    t0 = time.perf_counter_ns()
    nvrtc = ctypes.CDLL(a.nvrtc)
    prog = ctypes.c_void_p()
    rc = nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src, os.path.basename(a.file).encode(),
                                  0, None, None)
    rc = rc or nvrtc.nvrtcCompileProgram(prog, len(opts), arr)
    size = ctypes.c_size_t()
    rc = rc or nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(size))
    buf = ctypes.create_string_buffer(size.value or 1)
    rc = rc or nvrtc.nvrtcGetCUBIN(prog, buf)
    t1 = time.perf_counter_ns()
    if rc:
        log_size = ctypes.c_size_t()
        nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(log_size))
        log = ctypes.create_string_buffer(log_size.value or 1)
        nvrtc.nvrtcGetProgramLog(prog, log)
        print(json.dumps({"error": "NVRTC error %d: %s" % (rc, log.value.decode()[:300])}))
        return 1
    print(json.dumps({"ms": (t1 - t0) / 1e6, "cubin": size.value}))
    return 0


def run_child(a, kernel, env, no_cache=False, driver_first=False):
    opts, cccl = KERNELS[kernel]
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--nvrtc", a.nvrtc,
           "--arch", a.arch, "--file", os.path.join(a.corpus, kernel)]
    for o in opts + (["-I" + os.path.join(a.cuda, "include", "cccl")] if cccl else []):
        cmd += ["--opt=" + o]
    if no_cache:
        cmd.append("--no-cache")
    if driver_first:
        cmd.append("--driver-first")
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    try:
        r = json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        r = {"error": (p.stderr or p.stdout).strip()[-300:] or "exit %d" % p.returncode}
    return r


def has_driver():
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        n = ctypes.c_int()
        return cuda.cuInit(0) == 0 and cuda.cuDeviceGetCount(ctypes.byref(n)) == 0 and n.value > 0
    except OSError:
        return False


def cache_bytes(d):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--file", help=argparse.SUPPRESS)
    ap.add_argument("--opt", action="append", default=[], help=argparse.SUPPRESS)
    ap.add_argument("--no-cache", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--driver-first", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--cuda", default=os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    ap.add_argument("--nvrtc", help="libnvrtc to load (default: CUDA's lib64/libnvrtc.so.13)")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--corpus", default="examples")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json")
    a = ap.parse_args()
    if not a.nvrtc:
        a.nvrtc = os.path.join(a.cuda, "lib64", "libnvrtc.so.13")
    if a.child:
        return child(a)

    driver = has_driver()
    work = tempfile.mkdtemp(prefix="kcache-nvrtc-cache-")
    rows = []
    try:
        for kernel in KERNELS:
            variants = [("NVRTC --no-cache", {"no_cache": True}, "fresh"),
                        ("NVRTC's cache, cold", {}, "fresh")]
            if driver:
                variants += [("NVRTC's cache, warm", {}, "primed"),
                             ("NVRTC's cache, warm, driver started", {"driver_first": True},
                              "primed")]
            primed = os.path.join(work, "primed-" + kernel)
            os.makedirs(primed)
            base = dict(os.environ)
            base.pop("CUDA_CACHE_DISABLE", None)
            base.pop("CUDA_CACHE_PATH", None)
            first = run_child(a, kernel, dict(base, CUDA_CACHE_PATH=primed))
            if "error" in first:
                print("nvrtc_cache: %s: %s" % (kernel, first["error"]), file=sys.stderr)
                return 1
            stored = cache_bytes(primed)
            samples = {v[0]: [] for v in variants}
            for run in range(a.runs):
                for name, kw, cache in variants:  # interleaved
                    d = primed
                    if cache == "fresh":
                        d = os.path.join(work, "fresh-%s-%d" % (kernel, run))
                        shutil.rmtree(d, ignore_errors=True)
                        os.makedirs(d)
                    r = run_child(a, kernel, dict(base, CUDA_CACHE_PATH=d), **kw)
                    if "error" in r:
                        print("nvrtc_cache: %s, %s: %s" % (kernel, name, r["error"]),
                              file=sys.stderr)
                        return 1
                    samples[name].append(r["ms"])
            for name, _, cache in variants:
                xs = samples[name]
                note = ("ComputeCache held %d bytes after one compile" % stored
                        if cache == "primed" else "")
                if name == "NVRTC's cache, cold" and not driver:
                    note = "no CUDA driver here: NVRTC's cache stores nothing"
                rows.append({"variant": "%s: %s" % (kernel, name), "kernel": kernel,
                             "system": name, "runs": len(xs),
                             "median_ms": statistics.median(xs), "min_ms": min(xs),
                             "max_ms": max(xs), "note": note})
                print("%-14s %-40s %10.1f ms" % (kernel, name, statistics.median(xs)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"benchmark": "gpu-nvrtc-cache", "driver": driver, "arch": a.arch,
                       "runs": a.runs, "rows": rows,
                       "clock": "perf_counter_ns around load + create + compile + get CUBIN, "
                                "in a fresh process"}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

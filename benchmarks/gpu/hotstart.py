#!/usr/bin/env python3
"""GPU hot start: from process start to the first completed launch of
block_sort.cu's sort_then_scan<128, 4>, each run a fresh process, median of
several runs.

Rows:
  kcache cold        empty kcache cache: NVRTC compiles (the first run of a program)
  kcache warm        the cache holds the CUBIN (every later run)
  driver floor       the CUBIN read from a file and loaded: no cache, no compiler
  CuPy warm          cupy.RawModule on the same source and options, its on-disk
                     cache ($CUPY_CACHE_DIR, a fresh directory) primed by one run;
                     once by mangled name, once with name_expressions
  cuda.core warm     Program.compile(cache=FileStreamProgramCache) primed, if the
                     installed cuda.core has a program cache (said if not)

How time is measured: this script reads CLOCK_MONOTONIC (time.monotonic_ns)
just before it starts each process; the process reports CLOCK_MONOTONIC when
cuCtxSynchronize (or the stream sync) returned. "total" is the difference: it
includes fork/exec, the dynamic loader, the interpreter's start for Python
rows, cuInit and the context. "in-process" is from the program's first line
(main(), or the script's first statement before any import) to the same end.

Also, in process: a memoised kcache_gpu_function call (key derivation plus a
lookup), kcache_gpu_function_by_key (a lookup), and for comparison a cache hit
without the memo and a module load (what the memo saves).

Output: an aligned table on stdout and a JSON file (--json).
Exit 77 when there is no GPU (nothing measured), 1 on a failure.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
cmd_python = [None]  # the interpreter the Python rows run with (set in main)
EXPR = "sort_then_scan<128, 4>"


class Skip(Exception):
    pass


def child_env(base, **extra):
    env = dict(base)
    for k in ("KCACHE_PATH", "KCACHE_DISABLE", "KCACHE_MAX_SIZE"):
        env.pop(k, None)
    env.update({k: v for k, v in extra.items() if v is not None})
    return env


def python_env(base, **extra):
    # Our LD_LIBRARY_PATH (libkcache, libb2, libgomp) must not shadow Python's own libraries.
    env = child_env(base, **extra)
    env.pop("LD_LIBRARY_PATH", None)
    return env


def spawn(cmd, env, timeout=600):
    t0 = time.monotonic_ns()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode == 77:
        raise Skip(p.stderr.strip())
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        tail = (p.stderr.strip() or p.stdout.strip())[-1500:]
        prog = cmd[1] if cmd[0] == cmd_python[0] else cmd[0]
        raise RuntimeError("%s exited %d: %s" % (os.path.basename(prog), p.returncode, tail))
    rec = json.loads(lines[-1])
    if "done_ns" in rec:
        rec["total_ms"] = (rec["done_ns"] - t0) / 1e6
        rec["in_process_ms"] = (rec["done_ns"] - rec["main_ns"]) / 1e6
    return rec


def summarise(name, runs, note=""):
    tot = [r["total_ms"] for r in runs]
    inp = [r["in_process_ms"] for r in runs]
    return {
        "variant": name,
        "runs": len(runs),
        "median_ms": statistics.median(tot),
        "min_ms": min(tot),
        "max_ms": max(tot),
        "in_process_median_ms": statistics.median(inp),
        "all_correct": all(r.get("correct") for r in runs),
        "note": note,
        "samples": runs,
    }


def fresh(path):
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def device_info():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=60).stdout.strip().splitlines()
        return out[0] if out else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown (no nvidia-smi)"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", required=True, help="bench_gpu_start binary")
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--cuda", default=os.environ.get("CUDA_HOME") or "/usr/local/cuda")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--cold-runs", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--python", default=shutil.which("python3") or "python3")
    ap.add_argument("--json", required=True)
    ap.add_argument("--libs", help="LD_LIBRARY_PATH for bench_gpu_start only (a staged tree)")
    a = ap.parse_args()
    cmd_python[0] = a.python

    source = os.path.join(a.corpus, "block_sort.cu")
    cccl = os.path.join(a.cuda, "include", "cccl")
    for p in (a.bench, source, cccl):
        if not os.path.exists(p):
            print("hotstart: %s does not exist" % p, file=sys.stderr)
            return 1
    work = fresh(os.path.abspath(a.workdir))
    base = dict(os.environ, CUDA_HOME=a.cuda)
    if a.libs:
        # Only the C children get it (python_env drops it): Python keeps its own libraries.
        base["LD_LIBRARY_PATH"] = a.libs
    bench = [os.path.abspath(a.bench), "launch", "--corpus", a.corpus, "--cuda", a.cuda]
    rows, extra = [], {}
    t_start = time.time()

    try:
        # Nothing is measured until we know there is a GPU.
        memo_dir = fresh(os.path.join(work, "memo"))
        cubin = os.path.join(work, "sort_then_scan.cubin")
        memo = spawn([os.path.abspath(a.bench), "memo", "--corpus", a.corpus, "--cuda", a.cuda,
                      "--iters", str(a.iters), "--write-cubin", cubin],
                     child_env(base, KCACHE_DIR=memo_dir))
    except Skip as e:
        print("hotstart: skipped: %s" % e, file=sys.stderr)
        return 77
    extra["memo"] = memo

    # (a) cold: an empty cache each time.
    runs = []
    for i in range(a.cold_runs):
        d = fresh(os.path.join(work, "cold-%d" % i))
        runs.append(spawn(bench, child_env(base, KCACHE_DIR=d)))
    rows.append(summarise("kcache cold (empty cache)", runs,
                          "misses %s" % sorted({r["misses"] for r in runs})))

    # (b) warm: primed by one run that is not counted.
    d = fresh(os.path.join(work, "warm"))
    spawn(bench, child_env(base, KCACHE_DIR=d))
    runs = [spawn(bench, child_env(base, KCACHE_DIR=d)) for _ in range(a.runs)]
    misses = sorted({r["misses"] for r in runs})
    rows.append(summarise("kcache warm", runs,
                          "served from the cache" if misses == [0] else "MISSES %s" % misses))

    # The floor: the CUBIN already in a file, loaded by the driver.
    floor = bench[:2] + ["--corpus", a.corpus, "--cubin", cubin, "--symbol", memo["symbol"]]
    runs = [spawn(floor, child_env(base, KCACHE_DIR=d)) for _ in range(a.runs)]
    rows.append(summarise("driver floor (CUBIN file, no cache)", runs))

    # (c) CuPy, if it is there.
    have_cupy = subprocess.run([a.python, "-c", "import cupy"], env=python_env(base),
                               capture_output=True, text=True)
    if have_cupy.returncode != 0:
        rows.append({"variant": "CuPy warm", "note": "not installed (import cupy failed)"})
    else:
        for label, name in (("mangled name", memo["symbol"]), ("name_expressions", EXPR)):
            variant = "CuPy warm (%s)" % label
            cache = fresh(os.path.join(work, "cupy-" + label.replace(" ", "-")))
            cmd = [a.python, os.path.join(HERE, "cupy_start.py"), source, cccl, name]
            env = python_env(base, CUPY_CACHE_DIR=cache, CUPY_CACHE_IN_MEMORY="0")
            try:
                spawn(cmd, env)
                files = sum(len(f) for _, _, f in os.walk(cache))
                runs = [spawn(cmd, env) for _ in range(a.runs)]
                rows.append(summarise(variant, runs, "%d file(s) in CUPY_CACHE_DIR after "
                                      "priming, cupy %s" % (files, runs[0].get("cupy"))))
            except (RuntimeError, subprocess.SubprocessError) as e:
                rows.append({"variant": variant, "note": "failed: %s" % e})

    # (d) cuda.core's program cache, if the installed cuda.core has one.
    try:
        probe = json.loads(subprocess.run(
            [a.python, os.path.join(HERE, "cudacore_start.py"), "--probe"],
            env=python_env(base), capture_output=True, text=True, timeout=300).stdout or "{}")
    except (ValueError, subprocess.SubprocessError) as e:
        probe = {"available": False, "why": "probe failed: %s" % e}
    extra["cuda_core"] = probe
    if not probe.get("available"):
        rows.append({"variant": "cuda.core warm (program cache)",
                     "note": probe.get("why", "not available")})
    else:
        cache = fresh(os.path.join(work, "cudacore"))
        cmd = [a.python, os.path.join(HERE, "cudacore_start.py"), source, cccl, cache,
               memo["symbol"]]
        env = python_env(base)
        try:
            spawn(cmd, env)
            runs = [spawn(cmd, env) for _ in range(a.runs)]
            rows.append(summarise("cuda.core warm (program cache)", runs,
                                  "cuda.core %s via make_program_cache_key, by mangled "
                                  "name (compile(cache=) refuses name_expressions and "
                                  "include paths)" % probe.get("version")))
        except (RuntimeError, subprocess.SubprocessError) as e:
            rows.append({"variant": "cuda.core warm (program cache)", "note": "failed: %s" % e})

    device = device_info()
    report = {
        "benchmark": "gpu-hotstart",
        "kernel": "block_sort.cu " + EXPR,
        "device": device,
        "arch": memo.get("arch"),
        "runs": a.runs,
        "cold_runs": a.cold_runs,
        "clock": "CLOCK_MONOTONIC; total = child's end - parent's timestamp before spawn",
        "rows": rows,
        "memo": memo,
        "cuda_core": probe,
        "wall_s": round(time.time() - t_start, 1),
    }
    with open(a.json, "w") as f:
        json.dump(report, f, indent=2)

    print("GPU hot start: %s, process start -> first launch done" % report["kernel"])
    print("device: %s (%s); median of %d fresh processes (cold: %d)" % (
        device, memo.get("arch"), a.runs, a.cold_runs))
    w = max(len(r["variant"]) for r in rows)
    print("%-*s  %9s  %9s  %9s  %11s  %s" % (w, "variant", "total ms", "min ms", "max ms",
                                           "in-proc ms", "notes"))
    for r in rows:
        if "median_ms" in r:
            ok = "" if r["all_correct"] else "WRONG RESULT; "
            print("%-*s  %9.1f  %9.1f  %9.1f  %11.1f  %s%s" % (
                w, r["variant"], r["median_ms"], r["min_ms"], r["max_ms"],
                r["in_process_median_ms"], ok, r["note"]))
        else:
            print("%-*s  %9s  %9s  %9s  %11s  %s" % (w, r["variant"], "-", "-", "-", "-",
                                                   r["note"]))
    print()
    print("in process (median of %d calls), sort_then_scan<128, 4> (%d-byte CUBIN):" % (
        memo["iters"], memo["artifact_bytes"]))
    for key, label in (("memo_function_ns", "memoised kcache_gpu_function (key + lookup)"),
                       ("by_key_ns", "kcache_gpu_function_by_key (lookup)"),
                       ("compile_hit_ns", "cache hit without the memo (kcache_compiler_compile)"),
                       ("module_load_ns", "cuModuleLoadData of the CUBIN (saved by the memo)"),
                       ("first_call_ns", "first kcache_gpu_function (compile + load)")):
        print("  %-52s %12.2f us" % (label, memo[key] / 1e3))
    print("json: %s" % a.json)
    bad = [r["variant"] for r in rows if "median_ms" in r and not r["all_correct"]]
    if bad:
        print("hotstart: wrong results in: %s" % ", ".join(bad), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

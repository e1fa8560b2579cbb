#!/usr/bin/env python3
"""Runs every comparison of kcache with the alternatives and leaves one JSON
per part in --out.

Called by benchmarks/compare/run (which builds and installs what is needed);
gen_results.py turns the JSON into benchmarks/RESULTS.md and the plots.
"""
import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time

KERNELS = {
    # name: (source in the corpus, extra nvcc/kcache arguments)
    "saxpy": ("saxpy.cu", []),
    "block_sort": ("block_sort.cu", ["-std=c++17", "-I{cuda}/include/cccl"]),
}


def log(msg):
    print(f"[compare {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run(cmd, env=None, check=True, capture=False, cwd=None):
    r = subprocess.run(cmd, env=env, cwd=cwd, text=True,
                       stdout=subprocess.PIPE if capture else None,
                       stderr=subprocess.STDOUT if capture else None)
    if check and r.returncode != 0:
        raise SystemExit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout or ''}")
    return r


def timed(cmd, env=None, cwd=None):
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
    t = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr}")
    return t


def first_line(cmd):
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        return r.stdout.strip().splitlines()[0] if r.stdout.strip() else "?"
    except OSError as e:
        return f"not found ({e.strerror})"


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine(a):
    nvcc = run([a.nvcc, "--version"], capture=True).stdout
    m = re.search(r"release ([0-9.]+), (V[0-9.]+)", nvcc)
    pyver = run([a.python, "-c", "import sys; print(sys.version.split()[0])"],
                capture=True, check=False).stdout.strip()
    return {
        "cpu_model": cpu_model(),
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
        "os": first_line(["sh", "-c", ". /etc/os-release && echo $PRETTY_NAME"]),
        "kcache": first_line([a.kcache, "--version"]),
        "nvcc": f"{m.group(1)} ({m.group(2)})" if m else nvcc.strip().splitlines()[-1],
        "ccache": first_line(["ccache", "--version"]),
        "zstd": first_line(["pkg-config", "--modversion", "libzstd"]),
        "sqlite": first_line(["pkg-config", "--modversion", "sqlite3"]),
        "python": pyver,
        "filesystem": first_line(["sh", "-c", f"stat -f -c %T '{a.work}'"]),
        "time": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def make_cubins(a):
    """Real sm_90 CUBINs of the corpus: the bytes the synthetic set is made of."""
    d = os.path.join(a.work, "cubins")
    os.makedirs(d, exist_ok=True)
    out = []
    jobs = [("saxpy", "saxpy.cu", []),
            ("block_sort", "block_sort.cu", ["-std=c++17", f"-I{a.cuda}/include/cccl"]),
            ("main", "headers/main.cu", ["-Iheaders/include"]),
            ("tiled_gemm", a.tiled_wrapper, ["-I."])]
    for name, src, extra in jobs:
        p = os.path.join(d, name + ".sm_90.cubin")
        if not os.path.exists(p):
            log(f"nvcc -cubin {src}")
            run([a.nvcc, "-cubin", "-arch=sm_90", *extra, "-o", p + ".tmp", src], cwd=a.corpus)
            os.replace(p + ".tmp", p)
        out.append(p)
    return out


def ccache_bench(a, runs):
    """ccache in front of nvcc -c: miss and hit; then whether -cubin / -ptx are cached."""
    recs = []
    base = os.path.join(a.work, "ccache")
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base)
    env = dict(os.environ, CCACHE_DIR=os.path.join(base, "dir"))
    stats = {}
    for name, (src, extra) in KERNELS.items():
        extra = [x.format(cuda=a.cuda) for x in extra]
        srcp = os.path.join(a.corpus, src)
        obj = os.path.join(base, name + ".o")
        plain = [a.nvcc, "-c", "-arch=sm_90", *extra, srcp, "-o", obj]
        cc = ["ccache", *plain]
        t_plain = [timed(plain, env=env) for _ in range(1)]
        t_miss = timed(cc, env=env)
        t_hit = [timed(cc, env=env) for _ in range(runs)]
        recs += [
            {"group": "ccache", "system": "nvcc -c", "case": name, "metric": "median_ms",
             "value": statistics.median(t_plain) * 1e3, "unit": "ms"},
            {"group": "ccache", "system": "ccache", "case": name, "metric": "miss_ms",
             "value": t_miss * 1e3, "unit": "ms"},
            {"group": "ccache", "system": "ccache", "case": name, "metric": "hit_median_ms",
             "value": statistics.median(t_hit) * 1e3, "unit": "ms"},
            {"group": "e2e", "system": "ccache nvcc -c", "case": name, "metric": "median_ms",
             "value": statistics.median(t_hit) * 1e3, "unit": "ms"},
        ]
    # -cubin and -ptx: run twice each, and read what ccache counted.
    srcp = os.path.join(a.corpus, "saxpy.cu")
    for flag in ("-cubin", "-ptx"):
        run(["ccache", "-z"], env=env, capture=True)
        out = os.path.join(base, "saxpy" + flag.replace("-", "."))
        cmd = ["ccache", a.nvcc, flag, "-arch=sm_90", srcp, "-o", out]
        t1 = timed(cmd, env=env)
        t2 = timed(cmd, env=env)
        st = run(["ccache", "--print-stats"], env=env, capture=True).stdout
        kv = dict(line.split("\t") for line in st.strip().splitlines() if "\t" in line)
        hits = int(kv.get("direct_cache_hit", 0)) + int(kv.get("preprocessed_cache_hit", 0))
        summary = run(["ccache", "-s"], env=env, capture=True).stdout
        why = [line.strip() for line in summary.splitlines()
               if re.search(r"Uncacheable|linking|unsupported|Hits|Misses", line)]
        stats[flag] = {"hits": hits, "misses": int(kv.get("cache_miss", 0)),
                       "called_for_link": int(kv.get("called_for_link", 0)),
                       "unsupported_option": int(kv.get("unsupported_compiler_option", 0)),
                       "first_ms": t1 * 1e3, "second_ms": t2 * 1e3, "ccache_s": why}
        recs.append({"group": "ccache", "system": "ccache", "case": "saxpy " + flag,
                     "metric": "second_run_ms", "value": t2 * 1e3, "unit": "ms"})
    return {"benchmark": "ccache", "version": first_line(["ccache", "--version"]),
            "flags": stats, "records": recs}


def e2e_bench(a, runs, have_cudacore):
    """Whole processes on a hit: kcache compile, a Python process with cuda.core,
    and the process floors (kcache --version; python importing cuda.core)."""
    recs = []
    base = os.path.join(a.work, "e2e")
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base)
    env = dict(os.environ, KCACHE_DIR=os.path.join(base, "kcache"))
    # What starting any process costs: a statically linked C program whose
    # main returns 0: the floor `kcache --version` is held to, so that what a
    # whole-process hit costs beyond starting a process shows.
    static_true = os.path.join(base, "static-true")
    with open(static_true + ".c", "w") as f:
        f.write("int main(void) { return 0; }\n")
    if subprocess.run(["cc", "-static", "-O2", "-o", static_true, static_true + ".c"],
                      capture_output=True).returncode != 0:
        log("no static C library here (libc.a): the static floor is left out")
        static_true = None
    for name, (src, extra) in KERNELS.items():
        srcp = os.path.join(a.corpus, src)
        kargs = []
        for x in extra:
            x = x.format(cuda=a.cuda)
            kargs += ["--std", x.split("=", 1)[1]] if x.startswith("-std=") else ["-I", x[2:]]
        cmds = {
            "kcache compile": [a.kcache, "compile", srcp, "--arch", "sm_90", *kargs,
                               "-o", os.path.join(base, name + ".k.cubin"), "-q"],
        }
        if have_cudacore:
            cmds["cuda.core (python)"] = [
                a.python, a.cudacore_script, "hit", "--kernel", name, "--corpus", a.corpus,
                "--cuda", a.cuda, "--dir", os.path.join(base, "cudacore"),
                "--out", os.path.join(base, name + ".cc.cubin")]
        floors = {"kcache --version": [a.kcache, "--version"]}
        if static_true:
            floors["static C program"] = [static_true]
        if a.sqlite_process and name == "saxpy":
            # The same CUBIN from a one-table SQLite file (after kcache's miss
            # below has written it): the least a hit from one SQLite file costs.
            sqf_db = os.path.join(base, "sqlite-floor.db")
            floors["one-table SQLite program"] = [a.sqlite_process, sqf_db, "get", name,
                                                  os.path.join(base, name + ".sqf.cubin")]
        if have_cudacore:
            floors["python -c 'import cuda.core'"] = [a.python, "-c", "import cuda.core.utils"]
        for cmd in cmds.values():  # the misses, and the files into page cache
            timed(cmd, env=env)
            timed(cmd, env=env)
        if "one-table SQLite program" in floors:
            run([a.sqlite_process, sqf_db, "put", name, os.path.join(base, name + ".k.cubin")])
        allc = {**cmds, **(floors if name == "saxpy" else {})}
        times = {k: [] for k in allc}
        keys = list(allc)
        for r in range(runs):
            for j in range(len(keys)):
                k = keys[(j + r) % len(keys)]
                times[k].append(timed(allc[k], env=env))
        for k, v in times.items():
            case = name if k in cmds else "-"
            recs.append({"group": "e2e", "system": k, "case": case, "metric": "median_ms",
                         "value": statistics.median(v) * 1e3, "unit": "ms"})
    return {"benchmark": "e2e", "records": recs}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--bench", required=True, help="bench_compare executable")
    p.add_argument("--sqlite-process", help="sqlite_process executable (the SQLite floor)")
    p.add_argument("--kcache", required=True)
    p.add_argument("--python", required=True, help="Python with cuda.core (venv)")
    p.add_argument("--corpus", required=True)
    p.add_argument("--cuda", default="/usr/local/cuda")
    p.add_argument("--tiled-wrapper", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--entries", type=int, default=10000)
    p.add_argument("--only", default="", help="comma-separated parts to run")
    a = p.parse_args()
    a.nvcc = os.path.join(a.cuda, "bin", "nvcc")
    a.tiled_wrapper = os.path.abspath(a.tiled_wrapper)
    a.corpus = os.path.abspath(a.corpus)
    a.cudacore_script = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                     "cudacore_bench.py")
    os.makedirs(a.work, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    q = ["--quick"] if a.quick else []
    parts = a.only.split(",") if a.only else ["compile", "store", "ccache", "e2e"]
    t_start = time.time()
    load_start = open("/proc/loadavg").read().split()[:3]

    def out(name):
        return os.path.join(a.out, name + ".json")

    if "compile" in parts:
        log("compile: NVRTC, kcache, file-per-entry")
        run([a.bench, "compile", "--workdir", os.path.join(a.work, "compile"),
             "--corpus", a.corpus, "--cuda", a.cuda, "--json", out("compile"), *q])
        log("compile: cuda.core")
        run([a.python, a.cudacore_script, "compile", "--dir", os.path.join(a.work, "cc-compile"),
             "--corpus", a.corpus, "--cuda", a.cuda, "--json", out("cudacore-compile"), *q])
    if "store" in parts:
        cubins = make_cubins(a)
        log(f"store: kcache, file-per-entry, floor ({a.entries} entries)")
        sizes = os.path.join(a.work, "sizes.txt")
        samples = os.path.join(a.work, "samples.txt")
        cargs = []
        for c in cubins:
            cargs += ["--cubin", c]
        run([a.bench, "store", "--workdir", os.path.join(a.work, "store"), *cargs,
             "--entries", str(a.entries), "--json", out("store"), "--sizes-out", sizes,
             "--samples-out", samples, *q])
        st = json.load(open(out("store")))
        cap = next(r["value"] for r in st["records"]
                   if r["group"] == "cap" and r["case"] == "cap")
        ratio = next(r["value"] for r in st["records"]
                     if r["group"] == "cap" and r["case"] == "written")
        log("store: cuda.core")
        run([a.python, a.cudacore_script, "store", "--dir", os.path.join(a.work, "cc-store"),
             "--sizes", sizes, "--samples", samples, "--json", out("cudacore-store"),
             "--cap", str(int(cap)), "--cap-raw", str(int(cap * ratio)), *q])
    have_cc = True
    try:
        have_cc = json.load(open(out("cudacore-compile"))).get("available", False)
    except (OSError, ValueError):
        have_cc = run([a.python, "-c", "import cuda.core.utils"], check=False).returncode == 0
    if "ccache" in parts:
        log("ccache in front of nvcc")
        json.dump(ccache_bench(a, 3 if a.quick else 9), open(out("ccache"), "w"), indent=1)
    if "e2e" in parts:
        log("end to end: whole processes on a hit")
        json.dump(e2e_bench(a, 15 if a.quick else 31, have_cc), open(out("e2e"), "w"), indent=1)
    m = machine(a)
    m["mode"] = "quick" if a.quick else "full"
    m["loadavg_start"] = load_start
    m["loadavg_end"] = open("/proc/loadavg").read().split()[:3]
    m["wall_seconds"] = round(time.time() - t_start)
    json.dump(m, open(out("machine"), "w"), indent=1)
    log(f"done in {m['wall_seconds']} s")


if __name__ == "__main__":
    main()

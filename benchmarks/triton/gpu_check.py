#!/usr/bin/env python3
"""Triton and torch.compile on kcache, on a GPU machine: results, compiles, warm starts.

usage: PYTHONPATH=BUILD/python python3 gpu_check.py [--kernels 20] [--json FILE] [--bench]
       (or with kcache installed: pip install .)

Needs a CUDA GPU, torch and triton. Every run is a fresh process with fresh
caches in a temporary directory; inductor's own caches (FX graph, AOT
autograd) are off and its cache directory is new in every process, so that
Triton's cache is the only one that can serve a kernel:

  triton program  a @triton.jit kernel in KERNELS specializations, each
                  launched once: cold, then warm, with Triton's file cache
                  and with kcache (TRITON_CACHE_MANAGER=kcache.triton:CacheManager);
                  the warm kcache run's outputs must equal, bit for bit, those
                  of the cold run with Triton's own cache, and it must compile
                  no kernel;
  torch.compile   a small model's first call, the same four runs; the
                  second kcache process must compile no Triton kernel and
                  give the eager model's result.

A compile is counted by Triton's compilation listener where this Triton has
one (knobs.compilation.listener; inductor compiles in this process:
TORCHINDUCTOR_COMPILE_THREADS=1), and for kcache also by the cache's own
counter of misses in the triton namespace (which counts worker processes
too). Prints a row per run, then the short table (warm starts side by side,
what the warm processes compiled, whether the results are the same); exits 1
if a check fails. --bench then runs bench.py on the same machine (a kernel
served by triton.compile from each cache, median of 7 x 31; files; the cap).
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.abspath(__file__)


def count_compiles():
    """A list that Triton's listener appends each compile's cache_hit to, or None."""
    try:
        from triton import knobs

        if not hasattr(knobs.compilation, "listener"):
            return None  # this Triton has no listener: setting one would count nothing
        seen = []

        def listener(src, metadata, metadata_group, times, cache_hit):
            seen.append(bool(cache_hit))

        knobs.compilation.listener = listener
        return seen
    except Exception:
        return None


def digest(t):
    """SHA-256 of a tensor's bytes (numpy is not a dependency of torch)."""
    import torch

    raw = t.detach().cpu().contiguous().view(torch.uint8).flatten()
    try:
        data = raw.numpy().tobytes()
    except Exception:
        data = bytes(raw.tolist())
    return hashlib.sha256(data).hexdigest()


def child_triton(n):
    import torch
    import triton
    import triton.language as tl

    seen = count_compiles()

    @triton.jit
    def scale_add(x_ptr, y_ptr, out_ptr, n_elements, alpha, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        m = offs < n_elements
        x = tl.load(x_ptr + offs, mask=m)
        y = tl.load(y_ptr + offs, mask=m)
        tl.store(out_ptr + offs, tl.sin(x) * alpha + y, mask=m)

    g = torch.Generator(device="cuda").manual_seed(1234)
    size = 100003
    x = torch.randn(size, device="cuda", generator=g)
    y = torch.randn(size, device="cuda", generator=g)
    digests, launches = [], []
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(n):
        block, warps = 32 << (i % 6), 1 << (i // 6 % 4)
        out = torch.empty_like(x)
        t1 = time.perf_counter()
        scale_add[(triton.cdiv(size, block),)](x, y, out, size, 0.5 + i, BLOCK=block,
                                               num_warps=warps)
        torch.cuda.synchronize()
        launches.append(time.perf_counter() - t1)
        digests.append(digest(out))
    wall = time.perf_counter() - t0
    # A specialization's first launch: the kernel served (or compiled), its CUBIN
    # loaded, the run. The first of all also builds or loads the launcher: left out.
    later = sorted(launches[1:]) or launches
    return {"wall_s": wall, "digests": digests, "compiles": None if seen is None else
            sum(1 for h in seen if not h), "hits": None if seen is None else sum(seen),
            "launch_median_s": later[len(later) // 2]}


def child_torch():
    import torch

    seen = count_compiles()
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.LayerNorm(512),
        torch.nn.Linear(512, 256), torch.nn.Softmax(dim=-1)).cuda()
    x = torch.randn(64, 256, device="cuda")
    with torch.no_grad():
        eager = model(x)
        compiled = torch.compile(model)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = compiled(x)
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    return {"wall_s": wall, "max_abs_diff": float((out - eager).abs().max()),
            "digest": digest(out),
            "compiles": None if seen is None else sum(1 for h in seen if not h),
            "hits": None if seen is None else sum(seen)}


def triton_misses(kdir):
    import kcache

    if not os.path.exists(os.path.join(kdir, "kcache.db")):
        return 0, 0
    with kcache.Cache(kdir) as c:
        s = c.stats("triton")
    return s["misses"], s["entries"]


def files_under(path):
    return sum(len(fs) for _, _, fs in os.walk(path))


def summary(results, ref):
    """The short table: warm starts side by side, what the warm processes compiled, results."""
    def get(system, what, f):
        r = results.get("%s/%s/warm" % (what, system))
        try:
            v = f(r) if r is not None else None
        except KeyError:  # a run that failed early: its row says so above
            v = None
        return "-" if v is None else v

    def same(system, what):
        def f(r):
            if what == "triton":
                return "yes" if ref and r["digests"] == ref["digests"] else "NO"
            return "yes" if r["max_abs_diff"] <= 1e-3 else "NO"
        return get(system, what, f)

    rows = [("", "Triton's file cache", "kcache")]
    for label, f in (
        ("Triton program, warm: first use of all kernels (s)",
         lambda s_: get(s_, "triton", lambda r: "%.3f" % r["wall_s"])),
        ("  one kernel's first launch, median (ms)",
         lambda s_: get(s_, "triton", lambda r: "%.2f" % (r["launch_median_s"] * 1e3))),
        ("torch.compile, warm: first call (s)",
         lambda s_: get(s_, "torch", lambda r: "%.3f" % r["wall_s"])),
        ("Triton kernels the warm processes compiled (program, model)",
         lambda s_: "%s, %s" % (get(s_, "triton", lambda r: r["compiles"]),
                                get(s_, "torch", lambda r: r["compiles"]))),
        ("files in TRITON_CACHE_DIR (program, model)",
         lambda s_: "%s, %s" % (get(s_, "triton", lambda r: r["triton_files"]),
                                get(s_, "torch", lambda r: r["triton_files"]))),
        ("same results (program: Triton's cold bits; model: eager)",
         lambda s_: "%s, %s" % (same(s_, "triton"), same(s_, "torch"))),
    ):
        rows.append((label, str(f("file")), str(f("kcache"))))
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    return "\n".join("%-*s  %-*s  %s" % (w0, r[0], w1, r[1], r[2]) for r in rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--child", choices=["triton", "torch"], help=argparse.SUPPRESS)
    ap.add_argument("--kernels", type=int, default=20)
    ap.add_argument("--json")
    ap.add_argument("--bench", action="store_true",
                    help="then run bench.py here too (triton.compile hits, files, the cap)")
    a = ap.parse_args()
    if a.child:
        r = child_triton(a.kernels) if a.child == "triton" else child_torch()
        json.dump(r, sys.stdout)
        return 0

    tmp = tempfile.mkdtemp(prefix="kcache-gpu-check-")
    rows, results, failures = [], {}, []
    try:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("KCACHE_", "TRITON_"))}
        base.update({"TORCHINDUCTOR_FX_GRAPH_CACHE": "0", "TORCHINDUCTOR_AUTOGRAD_CACHE": "0",
                     "TORCHINDUCTOR_COMPILE_THREADS": "1", "TRITON_DEFAULT_FP_FUSION": "1"})
        for what in ("triton", "torch"):
            for system in ("file", "kcache"):
                d = os.path.join(tmp, what, system)
                tdir, kdir = os.path.join(d, "triton"), os.path.join(d, "kcache")
                os.makedirs(tdir)
                os.makedirs(kdir)
                for run in ("cold", "warm"):
                    env = dict(base, TRITON_CACHE_DIR=tdir,
                               TORCHINDUCTOR_CACHE_DIR=os.path.join(d, "inductor-" + run))
                    if system == "kcache":
                        env.update(TRITON_CACHE_MANAGER="kcache.triton:CacheManager",
                                   KCACHE_DIR=kdir)
                    before = triton_misses(kdir)[0]
                    t0 = time.perf_counter()
                    p = subprocess.run([sys.executable, HERE, "--child", what, "--kernels",
                                        str(a.kernels)], env=env, capture_output=True, text=True,
                                       timeout=900)
                    proc_s = time.perf_counter() - t0
                    if p.returncode:
                        print(p.stderr[-4000:], file=sys.stderr)
                        failures.append("%s %s %s: exit %d" % (what, system, run, p.returncode))
                        continue
                    r = json.loads(p.stdout)
                    misses, entries = triton_misses(kdir)
                    r.update(process_s=proc_s, triton_files=files_under(tdir),
                             kcache_misses=misses - before if system == "kcache" else None,
                             kcache_entries=entries if system == "kcache" else None)
                    results["%s/%s/%s" % (what, system, run)] = r
        # The checks.
        R = results.get
        ref = R("triton/file/cold")
        for key in ("triton/kcache/warm", "triton/kcache/cold", "triton/file/warm"):
            if ref and R(key) and R(key)["digests"] != ref["digests"]:
                failures.append("%s: outputs differ from Triton's own cold run" % key)
        for key in ("triton/kcache/warm", "torch/kcache/warm"):
            r = R(key)
            if r is None:
                continue
            if r["compiles"]:
                failures.append("%s: Triton compiled %d kernels" % (key, r["compiles"]))
            if r["kcache_misses"]:
                failures.append("%s: %d misses in kcache's triton namespace"
                                % (key, r["kcache_misses"]))
            if r["triton_files"]:
                failures.append("%s: %d files in TRITON_CACHE_DIR" % (key, r["triton_files"]))
        for key in ("triton/file/cold", "triton/kcache/cold", "torch/file/cold", "torch/kcache/cold"):
            # A cold run compiles: a count of 0 there means the counting is broken, not the cache.
            if R(key) and R(key)["compiles"] == 0:
                failures.append("%s: no compile seen in a cold run (the listener is not called)"
                                % key)
            if key.endswith("kcache/cold") and R(key) and not R(key)["kcache_misses"]:
                failures.append("%s: no miss counted in a cold run" % key)
        for key in ("torch/file/cold", "torch/file/warm", "torch/kcache/cold", "torch/kcache/warm"):
            if R(key) and R(key)["max_abs_diff"] > 1e-3:
                failures.append("%s: differs from eager by %g" % (key, R(key)["max_abs_diff"]))

        def fmt(v, f="%s"):
            return "-" if v is None else f % v

        head = ("run", "first use s", "process s", "Triton compiles", "hits", "kcache misses",
                "files in TRITON_CACHE_DIR", "same result")
        for key, r in results.items():
            what = key.split("/")[0]
            same = (r["digests"] == ref["digests"]) if what == "triton" and ref else (
                r.get("max_abs_diff", 0) <= 1e-3)
            rows.append((key, fmt(r["wall_s"], "%.3f"), fmt(r["process_s"], "%.2f"),
                         fmt(r["compiles"]), fmt(r["hits"]), fmt(r["kcache_misses"]),
                         str(r["triton_files"]), "yes" if same else "NO"))
        widths = [max(len(str(x[i])) for x in rows + [head]) for i in range(len(head))]
        print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
        for row in rows:
            print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))
        print()
        print(summary(results, ref))
        import torch
        import triton

        print("GPU: %s; torch %s; triton %s; %d Triton kernels" % (
            torch.cuda.get_device_name(), torch.__version__, triton.__version__, a.kernels))
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"results": results, "failures": failures}, f, indent=1)
        for f in failures:
            print("FAIL: " + f)
        print("ok" if not failures else "%d checks failed" % len(failures))
        if a.bench:
            print("\n== bench.py (the same machine: triton.compile served by each cache)")
            b = subprocess.run([sys.executable, os.path.join(os.path.dirname(HERE), "bench.py"),
                                "--kernels", "32", "--rounds", "7"] +
                               (["--json", a.json[:-5] + "-bench.json"] if a.json and
                                a.json.endswith(".json") else []), timeout=3600)
            if b.returncode:
                failures.append("bench.py: exit %d" % b.returncode)
                print("FAIL: bench.py exit %d" % b.returncode)
        return 0 if not failures else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

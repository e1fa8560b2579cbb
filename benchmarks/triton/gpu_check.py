#!/usr/bin/env python3
"""Triton and torch.compile on kcache, on a GPU machine: results, compiles, warm starts.

usage: PYTHONPATH=BUILD/python python3 gpu_check.py [--kernels 20] [--json FILE]
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
too). Prints a table; exits 1 if a check fails.
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
    digests = []
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(n):
        block, warps = 32 << (i % 6), 1 << (i // 6 % 4)
        out = torch.empty_like(x)
        scale_add[(triton.cdiv(size, block),)](x, y, out, size, 0.5 + i, BLOCK=block,
                                               num_warps=warps)
        torch.cuda.synchronize()
        digests.append(digest(out))
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "digests": digests, "compiles": None if seen is None else
            sum(1 for h in seen if not h), "hits": None if seen is None else sum(seen)}


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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--child", choices=["triton", "torch"], help=argparse.SUPPRESS)
    ap.add_argument("--kernels", type=int, default=20)
    ap.add_argument("--json")
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
        return 0 if not failures else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

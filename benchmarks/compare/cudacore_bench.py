#!/usr/bin/env python3
"""cuda.core's FileStreamProgramCache, measured on the same work as kcache.

    cudacore_bench.py store --dir D --sizes F --samples F --json OUT [--quick]
                            --cap BYTES --cap-raw BYTES
    cudacore_bench.py compile --corpus DIR --cuda DIR --dir D --json OUT [--quick]
    cudacore_bench.py hit --kernel NAME --corpus DIR --cuda DIR --dir D --out FILE

Writes the same records as bench_compare ({group, system, case, metric,
value, unit}). If cuda.core cannot be imported, or has no program cache, the
JSON says so (available: false, with the error) instead of failing.
"""
import argparse
import hashlib
import json
import multiprocessing
import os
import shutil
import statistics
import sys
import time

SYSTEM = "cuda.core"
BINS = ["4-8 KiB", "8-32 KiB", "32-128 KiB", "128-512 KiB", "512-1024 KiB"]
RECORDS = []


def rec(group, system, case, metric, value, unit=""):
    RECORDS.append({"group": group, "system": system, "case": case, "metric": metric,
                    "value": value, "unit": unit})
    print(f"  {group:10} {system:14} {case:22} {metric:16} {value:14.6g} {unit}",
          file=sys.stderr)


def q(values, p):
    v = sorted(values)
    if p == 0.5:
        return statistics.median(v)
    i = max(0, min(len(v) - 1, int(-(-p * len(v) // 1)) - 1))
    return v[i]


def import_cache():
    """Returns (module, FileStreamProgramCache) or raises with the reason."""
    import cuda.core as cc
    from cuda.core.utils import FileStreamProgramCache
    return cc, FileStreamProgramCache


def entry_key(i):
    return hashlib.blake2b(b"entry-%d" % i, digest_size=32).digest()


_BASE = None


def entry_bytes(i, size):
    """Distinct bytes per entry; content does not matter to a cache that
    stores raw bytes (cuda.core does not compress)."""
    global _BASE
    if _BASE is None:
        _BASE = os.urandom(1 << 20)
    return i.to_bytes(8, "little") + _BASE[8:size]


def walk_usage(root):
    files = dirs = apparent = allocated = 0
    for dirpath, dirnames, filenames in os.walk(root):
        st = os.lstat(dirpath)
        dirs += 1
        apparent += st.st_size
        allocated += st.st_blocks * 512
        for f in filenames:
            try:
                st = os.lstat(os.path.join(dirpath, f))
            except FileNotFoundError:
                continue
            files += 1
            apparent += st.st_size
            allocated += st.st_blocks * 512
    return files, dirs, apparent, allocated


def drop_cache(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _throughput_child(args):
    cache_dir, n, seconds, seed, start_at = args
    _, FSC = import_cache()
    import random
    rnd = random.Random(seed)
    cache = FSC(cache_dir)
    keys = [entry_key(i) for i in range(n)]
    while time.time() < start_at:
        time.sleep(0.001)
    ops = nbytes = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        data = cache[keys[rnd.randrange(n)]]
        nbytes += len(data)
        ops += 1
    cache.close()
    return ops, nbytes


def bench_store(a):
    cc, FSC = import_cache()
    sizes = [int(x) for x in open(a.sizes).read().split()]
    samples = {}
    for line in open(a.samples):
        b, i = line.split()
        samples.setdefault(int(b), []).append(int(i))
    n = len(sizes)
    root = a.dir
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    cdir = os.path.join(root, "cache")

    cache = FSC(cdir)
    t = 0.0
    for i, s in enumerate(sizes):
        data = entry_bytes(i, s)
        t0 = time.perf_counter()
        cache[entry_key(i)] = data
        t += time.perf_counter() - t0
    cache.close()
    rec("populate", SYSTEM, "all", "puts_per_s", n / t, "1/s")
    files, dirs, apparent, allocated = walk_usage(cdir)
    rec("disk", SYSTEM, "all", "apparent_bytes", apparent, "B")
    rec("disk", SYSTEM, "all", "allocated_bytes", allocated, "B")
    rec("disk", SYSTEM, "all", "files", files)
    rec("disk", SYSTEM, "all", "dirs", dirs)

    hit_iters = 600 if a.quick else 4000
    cold_iters = 60 if a.quick else 200
    cache = FSC(cdir)
    for b, name in enumerate(BINS):
        idx = samples.get(b, [])
        if not idx:
            continue
        keys = [(entry_key(i), sizes[i]) for i in idx]
        for k, s in keys:
            assert len(cache[k]) == s
        times = []
        for it in range(hit_iters):
            k, s = keys[it % len(keys)]
            t0 = time.perf_counter()
            data = cache[k]
            times.append(time.perf_counter() - t0)
            if len(data) != s:
                raise SystemExit("cuda.core returned the wrong size")
        rec("hit_warm", SYSTEM, name, "median_us", q(times, 0.5) * 1e6, "us")
        rec("hit_warm", SYSTEM, name, "p99_us", q(times, 0.99) * 1e6, "us")
        rec("hit_warm", SYSTEM, name, "size", statistics.median(s for _, s in keys), "B")
    cache.close()

    # One get per fresh cache object (a process's first hit); cold: the
    # entry file dropped from the page cache first (posix_fadvise DONTNEED).
    os.sync()
    for group, cold in (("hit_cold", True), ("hit_open", False)):
        for b, name in enumerate(BINS):
            idx = samples.get(b, [])
            if not idx:
                continue
            times = []
            for it in range(cold_iters):
                i = idx[it % len(idx)]
                k = entry_key(i)
                if cold:
                    probe = FSC(cdir)
                    # The entry's path: a private helper, used only to drop it.
                    drop_cache(str(probe._path_for_key(k)))
                    probe.close()
                t0 = time.perf_counter()
                c = FSC(cdir)
                data = c[k]
                c.close()
                times.append(time.perf_counter() - t0)
                assert len(data) == sizes[i]
            rec(group, SYSTEM, name, "median_us", q(times, 0.5) * 1e6, "us")
            rec(group, SYSTEM, name, "p99_us", q(times, 0.99) * 1e6, "us")

    seconds = 1.0 if a.quick else 3.0
    ctx = multiprocessing.get_context("fork")
    for procs in (1, 2, 4):
        start_at = time.time() + 0.5 + 0.2 * procs
        with ctx.Pool(procs) as pool:
            res = pool.map(_throughput_child,
                           [(cdir, n, seconds, p * 7777 + 1, start_at) for p in range(procs)])
        rec("throughput", SYSTEM, f"{procs} proc", "gets_per_s",
            sum(r[0] for r in res) / seconds, "1/s")
        rec("throughput", SYSTEM, f"{procs} proc", "MB_per_s",
            sum(r[1] for r in res) / seconds / 1e6, "MB/s")

    # Prune to half: cuda.core has no prune call; its cap is enforced by the
    # write that passes it. Open with the cap at half the entry bytes (the
    # open scans to seed its size tracker), then one small write evicts.
    total = sum(os.path.getsize(os.path.join(dp, f))
                for dp, _, fs in os.walk(os.path.join(cdir)) for f in fs)
    t0 = time.perf_counter()
    c = FSC(cdir, max_size_bytes=total // 2)
    t_open = time.perf_counter() - t0
    before = walk_usage(cdir)[0]
    t0 = time.perf_counter()
    c[b"trigger"] = b"x"
    t_evict = time.perf_counter() - t0
    c.close()
    after_files, _, _, _ = walk_usage(cdir)
    after = sum(os.path.getsize(os.path.join(dp, f))
                for dp, _, fs in os.walk(cdir) for f in fs)
    rec("prune", SYSTEM, "to half", "seconds", t_open + t_evict, "s")
    rec("prune", SYSTEM, "to half", "open_scan_seconds", t_open, "s")
    rec("prune", SYSTEM, "to half", "evicted", before - after_files + 1)
    rec("prune", SYSTEM, "to half", "bytes_after_over_target", after / (total // 2), "x")
    shutil.rmtree(cdir, ignore_errors=True)

    # Writing past a cap.
    cap = a.cap
    c = FSC(cdir, max_size_bytes=cap)
    written = i = puts = 0
    t = 0.0
    every = max(1, int(a.cap_raw / (60 * 1024) / 40) + 1)
    mx = 0
    base = 1 << 40
    while written < a.cap_raw:
        s = sizes[i % n]
        data = entry_bytes(base + i, s)
        t0 = time.perf_counter()
        c[entry_key(base + i)] = data
        t += time.perf_counter() - t0
        i += 1
        puts += 1
        written += s
        if puts % every == 0:
            _, dirs, app, _ = walk_usage(cdir)
            mx = max(mx, app)
            rec("cap_series", SYSTEM, f"{written / cap:.3f}", "disk_over_cap", app / cap, "x")
    c.close()
    files, dirs, app, _ = walk_usage(cdir)
    mx = max(mx, app)
    rec("cap", SYSTEM, "max", "disk_over_cap", mx / cap, "x")
    rec("cap", SYSTEM, "end", "disk_over_cap", app / cap, "x")
    rec("cap", SYSTEM, "all", "puts_per_s", puts / t, "1/s")
    rec("cap", SYSTEM, "end", "entries", files)
    rec("cap", SYSTEM, "end", "dirs", dirs)
    shutil.rmtree(root, ignore_errors=True)


KERNELS = {
    # name: (file, std, include dirs, name expressions, extra-digest source)
    "saxpy": ("saxpy.cu", None, [], []),
    "block_sort": ("block_sort.cu", "c++17", ["{cuda}/include/cccl"], []),
    "tiled_gemm": ("tiled_gemm.cu", None, [], ["tiled_gemm<float, 16>", "tiled_gemm<double, 8>"]),
    "headers": ("headers/main.cu", None, ["{corpus}/headers", "{corpus}/headers/include"], []),
}


def program_for(cc, name, corpus, cuda):
    f, std, incs, names = KERNELS[name]
    code = open(os.path.join(corpus, f)).read()
    kw = {"arch": "sm_90"}
    if std:
        kw["std"] = std
    if incs:
        kw["include_path"] = [i.format(cuda=cuda, corpus=corpus) for i in incs]
    opts = cc.ProgramOptions(**kw)
    return code, opts, names


def extra_digest_for(name, corpus, cuda):
    """What a careful user would pass: CCCL's version header for the
    toolkit's own headers, the bytes of the corpus headers for headers/."""
    h = hashlib.sha256()
    if name == "block_sort":
        h.update(open(os.path.join(cuda, "include/cccl/cub/version.cuh"), "rb").read())
    for d in (os.path.join(corpus, "headers"), os.path.join(corpus, "headers", "include")):
        if name == "headers":
            for f in sorted(os.listdir(d)):
                p = os.path.join(d, f)
                if os.path.isfile(p):
                    h.update(open(p, "rb").read())
    return h.digest()


def compile_cached(cc, FSC, cache, name, corpus, cuda):
    """One compile through the cache, as Program.compile(cache=) does it
    (key, get, compile and store on a miss), written out so that the same
    code also serves the compiles it refuses (include_path, name
    expressions). Returns (bytes, hit, how)."""
    from cuda.core.utils import make_program_cache_key
    code, opts, names = program_for(cc, name, corpus, cuda)
    try:
        key = make_program_cache_key(code=code, code_type="c++", options=opts,
                                     target_type="cubin", name_expressions=names)
        how = "make_program_cache_key() + cache.get()"
    except ValueError:
        key = make_program_cache_key(code=code, code_type="c++", options=opts,
                                     target_type="cubin", name_expressions=names,
                                     extra_digest=extra_digest_for(name, corpus, cuda))
        how = "make_program_cache_key(extra_digest=...) + cache.get()"
    data = cache.get(key)
    if data is not None:
        return data, True, how
    obj = cc.Program(code, "c++", opts).compile("cubin", name_expressions=names)
    cache[key] = obj
    return bytes(obj.code), False, how


def bench_compile(a):
    cc, FSC = import_cache()
    runs = 3 if a.quick else 7
    hit_runs = 200 if a.quick else 2000
    shutil.rmtree(a.dir, ignore_errors=True)
    cache = FSC(a.dir)
    for name in KERNELS:
        code, opts, names = program_for(cc, name, a.corpus, a.cuda)
        r = (runs + 1) // 2 if name == "block_sort" else runs
        times = []
        for _ in range(r):
            t0 = time.perf_counter()
            cc.Program(code, "c++", opts).compile("cubin", name_expressions=names)
            times.append(time.perf_counter() - t0)
        rec("compile", "cuda.core no-cache", name, "median_ms", q(times, 0.5) * 1e3, "ms")
        # Program.compile(cache=) itself: does it take this compile?
        try:
            cc.Program(code, "c++", opts).compile("cubin", name_expressions=names, cache=cache)
            rec("compile", SYSTEM, name, "program_compile_cache_accepted", 1)
        except ValueError as e:
            rec("compile", SYSTEM, name, "program_compile_cache_accepted", 0)
            RECORDS.append({"group": "note", "system": SYSTEM, "case": name,
                            "metric": "refused", "value": 0, "unit": str(e)[:300]})
        cache.clear()
        t0 = time.perf_counter()
        data, hit, how = compile_cached(cc, FSC, cache, name, a.corpus, a.cuda)
        assert not hit
        rec("compile", SYSTEM, name, "miss_ms", (time.perf_counter() - t0) * 1e3, "ms")
        times = []
        for _ in range(hit_runs):
            t0 = time.perf_counter()
            d2, hit, how = compile_cached(cc, FSC, cache, name, a.corpus, a.cuda)
            times.append(time.perf_counter() - t0)
            assert hit and d2 == data
        rec("compile", SYSTEM, name, "hit_median_us", q(times, 0.5) * 1e6, "us")
        rec("compile", SYSTEM, name, "hit_p99_us", q(times, 0.99) * 1e6, "us")
        RECORDS.append({"group": "note", "system": SYSTEM, "case": name, "metric": "how",
                        "value": 0, "unit": how})
    cache.close()
    shutil.rmtree(a.dir, ignore_errors=True)


def one_hit(a):
    """A whole process: import, look up (compiling on a miss), write the CUBIN."""
    cc, FSC = import_cache()
    cache = FSC(a.dir)
    data, hit, _ = compile_cached(cc, FSC, cache, a.kernel, a.corpus, a.cuda)
    cache.close()
    with open(a.out, "wb") as f:
        f.write(data)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["store", "compile", "hit"])
    p.add_argument("--dir", required=True)
    p.add_argument("--json")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--sizes")
    p.add_argument("--samples")
    p.add_argument("--cap", type=int, default=16 << 20)
    p.add_argument("--cap-raw", type=int, default=48 << 20)
    p.add_argument("--corpus")
    p.add_argument("--cuda", default="/usr/local/cuda")
    p.add_argument("--kernel")
    p.add_argument("--out")
    a = p.parse_args()
    if a.mode == "hit":
        one_hit(a)
        return
    meta = {"benchmark": "cudacore-" + a.mode, "available": True}
    try:
        cc, _ = import_cache()
        meta["version"] = cc.__version__
        try:
            import cuda.bindings
            meta["cuda_bindings"] = cuda.bindings.__version__
        except Exception as e:  # noqa: BLE001 - reported, not fatal
            meta["cuda_bindings"] = f"unknown ({e})"
    except Exception as e:  # noqa: BLE001 - the page says why
        meta["available"] = False
        meta["reason"] = f"{type(e).__name__}: {e}"
    if meta["available"]:
        try:
            (bench_store if a.mode == "store" else bench_compile)(a)
        except Exception as e:  # noqa: BLE001 - keep what was measured, say what failed
            meta["error"] = f"{type(e).__name__}: {e}"
            import traceback
            traceback.print_exc()
    meta["records"] = RECORDS
    with open(a.json, "w") as f:
        json.dump(meta, f, indent=1)


if __name__ == "__main__":
    main()

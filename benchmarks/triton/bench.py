#!/usr/bin/env python3
"""Triton's kernels served by kcache vs by Triton's own file cache (CPU: no GPU needed).

usage: PYTHONPATH=BUILD/python bench.py [--kernels 32] [--rounds 5] [--arch 90] [--json FILE]

Run with an interpreter that has triton (README, "Triton and torch.compile").
Both systems are measured in the same run, on fresh caches in a temporary
directory, each kernel compiled for GPUTarget("cuda", ARCH, 32):

* cold: one process compiles every kernel (both caches empty);
* warm: ROUNDS fresh processes each ask for every kernel again; the time of
  each triton.compile call is a hit, first in its process (no in-process
  memo helps either system); the median over all of them, and the median of
  each process's first (it opens the cache);
* files and inodes: what each system leaves on disk per kernel, and what
  kcache stages while a process runs (on a memory file system, gone at exit);
* disk: bytes on disk (allocated blocks) of each cache, and kcache's under a
  cap of half its uncapped size.
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

HERE = os.path.abspath(__file__)


def worker(args):
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget

    @triton.jit
    def bench_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        x = tl.load(x_ptr + offs, mask=m)
        y = tl.load(y_ptr + offs, mask=m)
        tl.store(out_ptr + offs, tl.exp(x) * 0.5 + y, mask=m)

    sig = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}
    target = GPUTarget("cuda", args.arch, 32)
    times = []
    for i in range(args.kernels):
        block, warps = 16 << (i % 8), 1 << (i // 8 % 4)
        extra = i // 32  # beyond 32 kernels: another num_stages
        t0 = time.perf_counter()
        triton.compile(triton.compiler.ASTSource(fn=bench_kernel, signature=sig,
                                                 constexprs={"BLOCK": block}),
                       target=target, options={"num_warps": warps, "num_stages": 1 + extra})
        times.append(time.perf_counter() - t0)
    staged = 0
    if os.environ.get("TRITON_CACHE_MANAGER"):
        import kcache.triton as kt

        for _, dirs, files in os.walk(kt.staging_dir()):
            staged += len(files) + len(dirs)
    json.dump({"times": times, "staged_inodes": staged}, sys.stdout)


def run_worker(env, kernels, arch):
    p = subprocess.run([sys.executable, HERE, "--worker", "--kernels", str(kernels), "--arch",
                        str(arch)], env=env, capture_output=True, text=True, timeout=1800)
    if p.returncode:
        sys.exit("bench worker failed:\n" + p.stderr[-3000:])
    return json.loads(p.stdout)


def tree(path):
    """(files, directories, bytes allocated) under path."""
    files = dirs = size = 0
    for root, ds, fs in os.walk(path):
        dirs += len(ds)
        for f in fs:
            files += 1
            size += os.lstat(os.path.join(root, f)).st_blocks * 512
    return files, dirs, size


def ms(x):
    return "%.2f ms" % (x * 1000)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--kernels", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--arch", type=int, default=90)
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    if args.worker:
        return worker(args)

    tmp = tempfile.mkdtemp(prefix="kcache-bench-triton-")
    # Staging on a memory file system, as kcache.triton picks by default.
    shm = tempfile.mkdtemp(prefix="kcache-bench-stage-",
                           dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else tmp)
    try:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("KCACHE_", "TRITON_"))}
        base["HOME"] = tmp
        sysenv = {}
        for name in ("triton", "kcache", "kcache-capped"):
            d = os.path.join(tmp, name)
            os.makedirs(os.path.join(d, "triton"))
            os.makedirs(os.path.join(d, "kcache"))
            os.makedirs(os.path.join(shm, name))
            e = dict(base, TRITON_CACHE_DIR=os.path.join(d, "triton"))
            if name != "triton":
                e.update(TRITON_CACHE_MANAGER="kcache.triton:CacheManager",
                         KCACHE_DIR=os.path.join(d, "kcache"),
                         KCACHE_TRITON_STAGING=os.path.join(shm, name))
            sysenv[name] = (d, e)

        res = {"kernels": args.kernels, "rounds": args.rounds, "arch": args.arch}
        cold = {}
        for name in ("triton", "kcache"):
            cold[name] = run_worker(sysenv[name][1], args.kernels, args.arch)
        warm = {"triton": [], "kcache": []}
        for _ in range(args.rounds):  # alternate, so that both see the same machine state
            for name in ("triton", "kcache"):
                warm[name].append(run_worker(sysenv[name][1], args.kernels, args.arch))

        for name in ("triton", "kcache"):
            d, _ = sysenv[name]
            t_files, t_dirs, t_bytes = tree(os.path.join(d, "triton"))
            k_files, k_dirs, k_bytes = tree(os.path.join(d, "kcache"))
            hits = [t for w in warm[name] for t in w["times"][1:]]
            firsts = [w["times"][0] for w in warm[name]]
            res[name] = {
                "cold_total_s": sum(cold[name]["times"]),
                "cold_median_s": statistics.median(cold[name]["times"][1:]),
                "hit_median_s": statistics.median(hits),
                "hit_p90_s": sorted(hits)[int(len(hits) * 0.9)],
                "first_hit_median_s": statistics.median(firsts),
                "warm_total_median_s": statistics.median(sum(w["times"]) for w in warm[name]),
                "files": t_files + k_files,
                "dirs": t_dirs + k_dirs,
                "disk_bytes": t_bytes + k_bytes,
                "staged_inodes_while_running": cold[name]["staged_inodes"],
                "stage_left_after_exit": len(os.listdir(os.path.join(shm, name))),
            }

        # The cap: half of what kcache took uncapped.
        cap = max(64 * 1024, res["kcache"]["disk_bytes"] // 2)
        d, e = sysenv["kcache-capped"]
        with open(os.path.join(d, "kcache", "kcache.conf"), "w") as f:
            f.write("max_size = %d\n" % cap)
        run_worker(e, args.kernels, args.arch)
        files, _, size = tree(os.path.join(d, "kcache"))
        # What the cap covers: the database and its WAL (<kcache/store.h>), in bytes as
        # the store counts them; SQLite's shared-memory index (32 KiB) and the lock files
        # sit beside them whatever the cap.
        capped = sum(os.path.getsize(os.path.join(d, "kcache", f))
                     for f in ("kcache.db", "kcache.db-wal")
                     if os.path.exists(os.path.join(d, "kcache", f)))
        sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
        import kcache

        with kcache.Cache(os.path.join(d, "kcache")) as c:
            kept = c.stats("triton")["entries"]
        res["capped"] = {"cap_bytes": cap, "disk_bytes": size, "db_wal_bytes": capped,
                         "kernels_kept": kept, "files": files}

        t, k, c = res["triton"], res["kcache"], res["capped"]
        n = args.kernels
        rows = [
            ("hit, median (%d x %d calls)" % (args.rounds, n - 1), ms(t["hit_median_s"]),
             ms(k["hit_median_s"])),
            ("hit, p90", ms(t["hit_p90_s"]), ms(k["hit_p90_s"])),
            ("first hit in a process, median", ms(t["first_hit_median_s"]),
             ms(k["first_hit_median_s"])),
            ("warm process, all %d kernels (median)" % n, ms(t["warm_total_median_s"]),
             ms(k["warm_total_median_s"])),
            ("cold, all %d kernels" % n, ms(t["cold_total_s"]), ms(k["cold_total_s"])),
            ("files on disk (per kernel)", "%d (%.1f)" % (t["files"], t["files"] / n),
             "%d (%.2f)" % (k["files"], k["files"] / n)),
            ("directories on disk", str(t["dirs"]), str(k["dirs"])),
            ("disk used (allocated)", "%d KiB" % (t["disk_bytes"] // 1024),
             "%d KiB" % (k["disk_bytes"] // 1024)),
            ("staged while running (tmpfs inodes)", "-", str(k["staged_inodes_while_running"])),
            ("left staged after exit", "-", str(k["stage_left_after_exit"])),
            ("under a cap of %d KiB (database + WAL)" % (c["cap_bytes"] // 1024), "no cap",
             "%d KiB, %d of %d kernels kept" % (c["db_wal_bytes"] // 1024, c["kernels_kept"], n)),
            ("  all files of the capped cache", "-", "%d KiB" % (c["disk_bytes"] // 1024)),
        ]
        w0 = max(len(r[0]) for r in rows)
        w1 = max(len(r[1]) for r in rows + [("", "Triton's file cache", "")])
        print("%-*s  %-*s  %s" % (w0, "", w1, "Triton's file cache", "kcache"))
        for r in rows:
            print("%-*s  %-*s  %s" % (w0, r[0], w1, r[1], r[2]))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(res, f, indent=1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(shm, ignore_errors=True)


if __name__ == "__main__":
    main()

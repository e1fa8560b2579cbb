#!/usr/bin/env python3
"""A hit through kcache.ProgramCache against cuda.core's own program caches.

usage: bench_program_cache.py [--entries N] [--size BYTES] [--rounds R]
                              [--fresh P] [--workdir DIR] [--json FILE]

Run with a Python that has the kcache package (pip install .) and cuda-core
installed (benchmarks/python/run builds both into a venv). In one run, for
kcache.ProgramCache, FileStreamProgramCache and InMemoryProgramCache:

- warm hit: N entries of BYTES each written, then R rounds over all N keys
  reading `cache[key]` in one process; the time of each read, median and p90;
- first hit in a fresh process: P new processes, each importing cuda.core and
  kcache (not timed), opening the cache and reading one key; the time from
  before the open to after the read, median (InMemory: none, it does not
  persist).

Values are CUBIN-like: half random, half repeated structure (compressible by
about 2x), distinct per key.
"""
import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

# Times, in microseconds: finding the class (kcache makes ProgramCache on first
# use), opening the cache, the first read. Their sum is the first hit.
CHILD = r'''
import sys, time
import cuda.core.utils as u
import kcache
which, path, key = sys.argv[1], sys.argv[2], bytes.fromhex(sys.argv[3])
t0 = time.perf_counter()
cls = kcache.ProgramCache if which == "kcache" else u.FileStreamProgramCache
t1 = time.perf_counter()
c = cls(path)
t2 = time.perf_counter()
data = c[key]
t3 = time.perf_counter()
assert len(data) > 0
print((t1 - t0) * 1e6, (t2 - t1) * 1e6, (t3 - t2) * 1e6)
'''


def value(i, size):
    rng = random.Random(i)
    half = size // 2
    head = rng.randbytes(half)
    tail = bytes((j * 7 + i) % 13 for j in range(size - half))
    return head + tail


def percentile(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))]


def warm(cache, keys, rounds):
    times = []
    get = cache.__getitem__
    for _ in range(rounds):
        for k in keys:
            t0 = time.perf_counter_ns()
            get(k)
            times.append((time.perf_counter_ns() - t0) / 1000)
    return times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--entries", type=int, default=200)
    ap.add_argument("--size", type=int, default=64 * 1024)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--fresh", type=int, default=15)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()

    import cuda.core.utils as u
    import kcache

    work = tempfile.mkdtemp(prefix="kcache-bench-py-", dir=a.workdir)
    try:
        keys = [b"bench-key-%06d" % i for i in range(a.entries)]
        caches = {
            "kcache.ProgramCache": kcache.ProgramCache(os.path.join(work, "kcache")),
            "FileStreamProgramCache": u.FileStreamProgramCache(os.path.join(work, "filestream")),
            "InMemoryProgramCache": u.InMemoryProgramCache(),
        }
        for c in caches.values():
            for i, k in enumerate(keys):
                c[k] = value(i, a.size)
        # Interleaved rounds, so that a noisy neighbour costs every backend alike.
        results = {name: [] for name in caches}
        for r in range(a.rounds):
            for name, c in caches.items():
                results[name] += warm(c, keys, 1)
        for name, c in caches.items():
            assert c[keys[0]] == value(0, a.size), name
        caches["kcache.ProgramCache"].close()

        fresh = {"kcache.ProgramCache": [], "FileStreamProgramCache": []}
        parts = {"kcache.ProgramCache": [], "FileStreamProgramCache": []}
        paths = {"kcache.ProgramCache": ("kcache", os.path.join(work, "kcache")),
                 "FileStreamProgramCache": ("filestream", os.path.join(work, "filestream"))}
        for i in range(a.fresh):
            key = keys[(i * 37) % len(keys)]
            for name, (which, path) in paths.items():
                p = subprocess.run([sys.executable, "-c", CHILD, which, path, key.hex()],
                                   capture_output=True, text=True, timeout=120)
                if p.returncode:
                    sys.exit("child failed: " + p.stderr)
                t = [float(x) for x in p.stdout.split()]
                parts[name].append(t)
                fresh[name].append(sum(t))

        rows = []
        for name in caches:
            w = results[name]
            f = fresh.get(name)
            rows.append({
                "cache": name,
                "warm_median_us": statistics.median(w),
                "warm_p90_us": percentile(w, 0.9),
                "warm_reads": len(w),
                "fresh_first_hit_median_us": statistics.median(f) if f else None,
                "fresh_processes": len(f) if f else 0,
                "fresh_parts_median_us": (
                    {part: statistics.median(t[j] for t in parts[name])
                     for j, part in enumerate(("class", "open", "first_read"))}
                    if f else None),
            })
        fs = next(r for r in rows if r["cache"] == "FileStreamProgramCache")
        print("%d entries of %d bytes; warm: %d reads each, interleaved; fresh: %d processes each"
              % (a.entries, a.size, len(results["kcache.ProgramCache"]), a.fresh))
        print()
        print("| cache | warm hit, median | warm hit, p90 | fresh process's first hit, median |"
              " vs FileStream (warm / first) |")
        print("|---|---:|---:|---:|---:|")
        for r in rows:
            first = ("%.1f us" % r["fresh_first_hit_median_us"]
                     if r["fresh_first_hit_median_us"] is not None else "n/a (not persistent)")
            ratio = "%.2fx / %s" % (
                r["warm_median_us"] / fs["warm_median_us"],
                "%.2fx" % (r["fresh_first_hit_median_us"] / fs["fresh_first_hit_median_us"])
                if r["fresh_first_hit_median_us"] is not None else "n/a")
            print("| %s | %.1f us | %.1f us | %s | %s |" % (r["cache"], r["warm_median_us"],
                                                        r["warm_p90_us"], first, ratio))
        print()
        print("first hit, median of each part: class / open / first read (us)")
        for r in rows:
            if r["fresh_parts_median_us"]:
                print("  %s: %s" % (r["cache"], " / ".join(
                    "%.1f" % v for v in r["fresh_parts_median_us"].values())))
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"entries": a.entries, "size": a.size, "rows": rows,
                           "python": sys.version.split()[0],
                           "kcache": kcache.__version__}, f, indent=2)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

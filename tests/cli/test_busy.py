#!/usr/bin/env python3
"""A busy cache: 16 processes run every verb against one capped cache at once.

Maintenance (vacuum, recompress, prune, import, clear) must not make a user's
command fail waiting for the write lock: every command exits as it would on
a quiet cache. A probe takes the write lock every few milliseconds and
records the longest wait, which bounds the longest hold. Afterwards the
cache is sound (integrity ok, every digest) and within its cap, and no entry
was lost. The books for that: every command that stores says what it stored
(kcache-fill prints each key, compile --json its misses, import --json what
it added or replaced), and the store counts, with each row it writes or
removes, entries_added, entries_removed and the removal's reason (evictions
by the cap or prune, entries_cleared, entries_replaced by a put of the same
key). Lost is a stored entry the books do not have (entries_added below what
the commands said they stored), a removal without a reason, or entries in
the file other than entries_added - entries_removed; and each entry
kcache-fill stored that is still there has the digest it had when stored
(verify checks the bytes against it). No file may have been set aside.

    test_busy.py KCACHE KCACHE_FILL [--seconds S] [--procs N] [--trace-holds]

--trace-holds runs every command under strace and reports how long each
held the cache's WAL write lock (the fcntl lock on byte 120 of its -shm),
the longest by verb: slower under strace, so an upper bound.

The default suite runs it for 15 s (under a minute here, with the commands
still under way at the end); the 3-minute run of the closing note (meson's
cli-busy-long, with -Dlong_tests=true):
    python3 tests/cli/test_busy.py build/cli/kcache build/tests/cli/kcache-fill --seconds 180
"""
import argparse
import os
import random
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

CAP = 24 << 20
ARCHES = ("sm_80", "sm_86", "sm_89", "sm_90")
# Outcomes that are answers, not failures: an entry another process evicted
# or cleared meanwhile is not there to get or inspect.
GONE = re.compile(r"no entry|not found|no cache yet|matches no entry")


def kernel_source():
    return (
        '#ifndef K\n#define K 1\n#endif\n'
        'extern "C" __global__ void axpy(float a, const float *x, float *y, int n) {\n'
        '    int i = blockIdx.x * blockDim.x + threadIdx.x;\n'
        '    if (i < n) y[i] = a * x[i] * K + y[i];\n}\n')


def stored_by(verb, out, cache_dir, digests):
    """How many puts the command says it made; kcache-fill's keys' digests as stored."""
    if verb == "fill":
        keys = re.findall(r"^([0-9a-f]{64})$", out, re.M)
        record_digests(os.path.join(cache_dir, "kcache.db"), keys, digests)
        return len(keys)
    if verb == "compile":
        return int(re.search(r'"misses": *(\d+)', out).group(1))
    if verb == "import":
        return sum(int(re.search(r'"%s": *(\d+)' % f, out).group(1)) for f in ("added", "replaced"))
    return 0


def record_digests(db, keys, digests):
    """The digest each key has now, read right after it was stored (it may be gone already)."""
    if not keys:
        return
    con = sqlite3.connect("file:%s?mode=ro" % db, uri=True, timeout=30)
    try:
        for k in keys:
            row = con.execute("SELECT digest FROM entry WHERE key = ?", (bytes.fromhex(k),)).fetchone()
            if row:
                digests[k] = row[0]
    finally:
        con.close()


def books(db, digests):
    """The store's counters, the entries there are, and the recorded digests that differ."""
    con = sqlite3.connect("file:%s?mode=ro" % db, uri=True, timeout=30)
    try:
        c = dict(con.execute("SELECT name, value FROM counter").fetchall())
        entries = con.execute("SELECT count(*) FROM entry").fetchone()[0]
        totals = con.execute("SELECT entries FROM totals").fetchone()[0]
        changed, present = 0, 0
        for k, d in digests.items():
            row = con.execute("SELECT digest FROM entry WHERE key = ?", (bytes.fromhex(k),)).fetchone()
            if row:
                present += 1
                changed += row[0] != d
    finally:
        con.close()
    return c, entries, totals, present, changed


def worker(args, wid, deadline, results, lock, stored, digests):
    rnd = random.Random(wid * 7919)
    work = os.path.join(args.tmp, "w%d" % wid)
    os.makedirs(work)
    env = dict(os.environ, KCACHE_DIR=args.dir, KCACHE_MAX_SIZE="%dB" % CAP)
    env.pop("KCACHE_PATH", None)
    kernel = os.path.join(work, "k.cu")
    with open(kernel, "w") as f:
        f.write(kernel_source())
    verbs = (["compile"] * 3 + ["get"] * 4 + ["inspect"] * 2 + ["ls"] * 2 + ["stats"] * 2 +
             ["fill"] * 4 + ["verify", "export", "import", "prune", "vacuum", "recompress",
                             "config", "path", "explain", "clear"])
    mine = []
    while time.monotonic() < deadline:
        verb = rnd.choice(verbs)
        if verb == "clear" and rnd.random() < 0.7:
            continue  # the rarest: everything else has something to work on
        keys = []
        if verb in ("get", "inspect"):
            out = subprocess.run([args.kcache, "ls", "--json"], env=env, capture_output=True,
                                 text=True)
            keys = re.findall(r'"key": *"([0-9a-f]{64})"', out.stdout)
            if not keys:
                verb = "ls"
        if verb == "compile":
            argv = [args.kcache, "compile", kernel, "--arch", rnd.choice(ARCHES),
                    "-DK=%d" % rnd.randrange(1, 40), "-o", os.path.join(work, "k.cubin"),
                    "--json"]
        elif verb == "fill":
            argv = [args.fill, os.path.join(args.dir, "kcache.db"), str(rnd.randrange(2, 6)),
                    "--size", str(rnd.choice((16384, 65536, 262144))),
                    "--seed", str(rnd.randrange(1 << 30)), "--arch", rnd.choice(ARCHES)]
        elif verb == "get":
            argv = [args.kcache, "get", rnd.choice(keys)[:16], "-o", os.path.join(work, "g.bin")]
        elif verb == "inspect":
            argv = [args.kcache, "inspect", rnd.choice(keys)[:16]]
        elif verb == "export":
            argv = [args.kcache, "export", os.path.join(work, "out.kcache"),
                    "--arch", rnd.choice(ARCHES)]
        elif verb == "import":
            argv = [args.kcache, "import", args.bundle, "--json"]
        elif verb == "prune":
            argv = [args.kcache, "prune", "--max-size", "%dK" % rnd.randrange(4096, 20480)]
        elif verb == "recompress":
            codec = rnd.choice(("zstd", "lz4", "none"))
            argv = [args.kcache, "recompress"]
            env_v = dict(env, KCACHE_COMPRESSION=codec)
        elif verb == "config":
            argv = [args.kcache, "config"]
        elif verb == "explain":
            argv = [args.kcache, "explain", kernel, "--arch", "sm_90"]
        else:
            argv = [args.kcache, verb]
        if args.trace_holds:  # LeakSanitizer cannot run under ptrace
            env = dict(env, ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") + ":detect_leaks=0")
            env_v = dict(env_v, ASAN_OPTIONS=env["ASAN_OPTIONS"]) if verb == "recompress" else env
            argv = ["strace", "-qq", "-f", "-ttt", "-y", "-e", "trace=fcntl", "-o",
                    os.path.join(args.traces, "%s.%d.%d" % (verb, wid, len(mine)))] + argv
        t0 = time.monotonic()
        p = subprocess.run(argv, env=env_v if verb == "recompress" else env,
                           capture_output=True, text=True)
        took = time.monotonic() - t0
        ok = p.returncode == 0 or (verb in ("get", "inspect") and GONE.search(p.stderr))
        if verb == "explain" and p.returncode == 1 and not p.stderr.strip():
            ok = True  # "would miss" is explain's answer, exit 1 by design
        mine.append((verb, ok, took, p.returncode, p.stderr.strip()[-300:]))
        # kcache-fill prints each key once its put returned: counted even if a later put failed.
        if p.returncode == 0 or verb == "fill":
            stored[wid] += stored_by(verb, p.stdout, args.dir, digests)
    with lock:
        results.extend(mine)


LOCK = re.compile(r"^(\d+) +([\d.]+) fcntl\(\d+<[^>]*/cache/kcache\.db-shm>, F_SETLK, \{l_type=(F_WRLCK|F_UNLCK), "
                  r"l_whence=SEEK_SET, l_start=120, l_len=1\}\) = 0")


def longest_holds(traces):
    """The longest hold of the WAL write lock by verb, from the strace logs."""
    worst = {}
    for name in os.listdir(traces):
        verb = name.split(".")[0]
        since = {}
        with open(os.path.join(traces, name)) as f:
            for line in f:
                m = LOCK.match(line)
                if not m:
                    continue
                pid, t, kind = m.group(1), float(m.group(2)), m.group(3)
                if kind == "F_WRLCK":
                    since[pid] = t
                elif pid in since:
                    worst[verb] = max(worst.get(verb, 0.0), t - since.pop(pid))
    return worst


def probe(path, deadline, waits):
    """Takes the write lock every 5 ms: the longest wait bounds the longest hold."""
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    con = sqlite3.connect(path, timeout=30, isolation_level=None)
    while time.monotonic() < deadline:
        t0 = time.monotonic()
        try:
            con.execute("BEGIN IMMEDIATE")
            con.execute("ROLLBACK")
        except sqlite3.OperationalError:
            pass  # the file set aside or replaced under it: the next round reopens
        waits.append(time.monotonic() - t0)
        time.sleep(0.005)
    con.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kcache")
    ap.add_argument("fill")
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--procs", type=int, default=16)
    ap.add_argument("--trace-holds", action="store_true")
    args = ap.parse_args()
    args.kcache, args.fill = os.path.abspath(args.kcache), os.path.abspath(args.fill)
    args.tmp = tempfile.mkdtemp(prefix="kcache-busy-")
    args.traces = os.path.join(args.tmp, "traces")
    os.makedirs(args.traces)
    try:
        args.dir = os.path.join(args.tmp, "cache")
        env = dict(os.environ, KCACHE_DIR=args.dir, KCACHE_MAX_SIZE="%dB" % CAP)
        db = os.path.join(args.dir, "kcache.db")
        # A full cache to start with, and a bundle of other entries to import.
        digests, setup_stored = {}, 0
        for arch in ARCHES:
            p = subprocess.run([args.fill, db, "20", "--size", "262144", "--arch", arch, "--seed",
                                arch[3:]], env=env, check=True, capture_output=True, text=True)
            setup_stored += stored_by("fill", p.stdout, args.dir, digests)
        src = os.path.join(args.tmp, "src.db")
        subprocess.run([args.fill, src, "24", "--size", "131072", "--seed", "99"],
                       env=env, check=True, capture_output=True)
        args.bundle = os.path.join(args.tmp, "b.kcache")
        subprocess.run([args.kcache, "--path", src, "export", args.bundle], env=env,
                       check=True, capture_output=True)
        deadline = time.monotonic() + args.seconds
        results, waits, lock = [], [], threading.Lock()
        stored = [0] * args.procs
        threads = [threading.Thread(target=worker,
                                    args=(args, i, deadline, results, lock, stored, digests))
                   for i in range(args.procs)]
        threads.append(threading.Thread(target=probe, args=(db, deadline, waits)))
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - t0
        failed = [r for r in results if not r[1]]
        by_verb = {}
        for r in results:
            n, f, worst = by_verb.get(r[0], (0, 0, 0.0))
            by_verb[r[0]] = (n + 1, f + (not r[1]), max(worst, r[2]))
        print("%d processes, %.0f s: %d commands, %d failed" %
              (args.procs, elapsed, len(results), len(failed)))
        for verb in sorted(by_verb):
            n, f, worst = by_verb[verb]
            print("  %-10s %5d run %3d failed  slowest %.2f s" % (verb, n, f, worst))
        for r in failed[:10]:
            print("FAILED %s (exit %d): %s" % (r[0], r[3], r[4]))
        waits.sort()
        if waits:
            print("write lock, probe's wait: %d takes, median %.1f ms, p99 %.1f ms, longest %.1f ms"
                  % (len(waits), 1000 * waits[len(waits) // 2],
                     1000 * waits[int(len(waits) * 0.99)], 1000 * waits[-1]))
        if args.trace_holds:
            holds = longest_holds(args.traces)
            print("longest hold of the write lock (under strace): " +
                  ", ".join("%s %.0f ms" % (v, 1000 * h)
                            for v, h in sorted(holds.items(), key=lambda x: -x[1])))
        # Afterwards: sound, and within the cap once the writers are idle.
        v = subprocess.run([args.kcache, "verify"], env=env, capture_output=True, text=True)
        print("verify: exit %d: %s" % (v.returncode, (v.stdout + v.stderr).strip().replace("\n", "; ")))
        subprocess.run([args.kcache, "prune"], env=env, capture_output=True)
        on_disk = sum(os.path.getsize(db + s) for s in ("", "-wal") if os.path.exists(db + s))
        print("on disk after the run: %.1f MiB (cap %.0f MiB)" % (on_disk / 2**20, CAP / 2**20))
        # The books: what the commands stored against what the store counted.
        c, entries, totals, present, changed = books(db, digests)
        said = setup_stored + sum(stored)
        added, removed = c.get("entries_added", 0), c.get("entries_removed", 0)
        reasons = c.get("evictions", 0) + c.get("entries_cleared", 0) + c.get("entries_replaced", 0)
        lost = max(0, said - added) + max(0, removed - reasons) + abs(entries - (added - removed))
        aside = [n for n in os.listdir(args.dir) if ".corrupt-" in n]
        print("books: %d puts said, %d counted; %d removed (%d evicted, %d cleared, %d replaced); "
              "%d entries = %d - %d: %d entries lost" %
              (said, added, removed, c.get("evictions", 0), c.get("entries_cleared", 0),
               c.get("entries_replaced", 0), entries, added, removed, lost))
        print("kcache-fill's entries: %d stored, %d still there, %d changed; totals %d, "
              "files set aside: %d" % (len(digests), present, changed, totals, len(aside)))
        bad = len(failed) > 0 or v.returncode != 0 or on_disk > CAP
        # A command that failed part way (only kcache-fill says what it stored before) may
        # have stored more than was said; otherwise the two are equal.
        bad = bad or lost or (said != added and not failed) or changed or totals != entries or aside
        for verb in ("compile", "get", "stats", "ls", "vacuum", "recompress", "prune", "import"):
            if verb not in by_verb:
                print("verb %s never ran" % verb)
                bad = True
        return 1 if bad else 0
    finally:
        shutil.rmtree(args.tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

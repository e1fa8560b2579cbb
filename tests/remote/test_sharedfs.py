#!/usr/bin/env python3
"""The shared file system tier as a cluster uses it: a shared directory on
sshfs over loopback (tests/pyhelp/sshfs.py), several nodes (own hostname,
own /var/tmp, so their own node-local cache) x several ranks compiling the
same kernels at once, then a node that starts afterwards. No lock is
honoured across nodes here: sshfs does not pass byte-range locks on to the
server, and the nodes share nothing but the directory.

Usage: test_sharedfs.py KCACHE [--nodes N --ranks R --kernels K] [--kills N]
  (exit 77 without root, FUSE, sshfs or a toolkit). The default run is
  small (3 x 2 x 6); benchmarks/sharedfs/cluster.sh runs 8 x 4 x 40 and
  50 kills.
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pyhelp"))
from kctest import Skip, check, run_tests  # noqa: E402
import sshfs  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("kcache")
ap.add_argument("--nodes", type=int, default=3)
ap.add_argument("--ranks", type=int, default=2)
ap.add_argument("--kernels", type=int, default=6)
ap.add_argument("--kills", type=int, default=0,
                help="also kill this many publishers at random moments (long mode)")
ARGS = ap.parse_args()
KCACHE = os.path.abspath(ARGS.kcache)
KERNEL = 'extern "C" __global__ void k%d(float *x) { x[threadIdx.x] *= %d.0f; }\n'


def env_for(shared):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/var/tmp",
           "KCACHE_SHARED": shared}
    for k in ("LD_LIBRARY_PATH", "CUDA_HOME", "LSAN_OPTIONS", "ASAN_OPTIONS", "UBSAN_OPTIONS"):
        if k in os.environ:
            env[k] = os.environ[k]
    return env


def tier_dirs(root, m):
    """The shared tier's directory on the mount m, and the sources' and outputs' here, made."""
    shared = os.path.join(m.mnt, "kcache-shared")
    src, out = os.path.join(root, "src"), os.path.join(root, "out")
    for d in (shared, src, out):
        os.makedirs(d)
    return shared, src, out


def rank_script(srcdir, outdir, node, rank, n):
    """One rank: every kernel in turn (its own order), one kcache process each."""
    order = [(i + rank * 3) % n for i in range(n)]
    lines = ["cd %s" % srcdir]
    for i in order:
        lines.append("%s compile k%d.cu --arch sm_90 -o %s/%s-%d-k%d.cubin >>%s/%s-%d.out "
                     "2>>%s/%s-%d.err || echo FAILED k%d >>%s/%s-%d.err"
                     % (KCACHE, i, outdir, node, rank, i, outdir, node, rank, outdir, node, rank,
                        i, outdir, node, rank))
    return "; ".join(lines)


def warm(srcdir, outdir, node):
    """A node's cache that has run before: NVRTC's environment probed (compile/nvenv.c) by
    a kernel of its own. Under ASan the probe's fork can hang until its 30 s limit, and
    then every compile of a fresh cache runs uncached; that is not what is tested here."""
    return ("%s compile %s/warm.cu --arch sm_90 -o %s/%s-warm.cubin >/dev/null 2>%s/%s-warm.err; "
            % (KCACHE, srcdir, outdir, node, outdir, node))


def probe_failed(outdir):
    """Whether a node's probe failed (then every compile there ran uncached): a skip."""
    for name in os.listdir(outdir):
        if name.endswith("-warm.err") and "probe of NVRTC's environment failed" in open(
                os.path.join(outdir, name)).read():
            return name[:-9]
    return None


def node_process(name, script, env):
    return subprocess.Popen(sshfs.node(name, ["sh", "-c", script]), env=env)


def test_cluster(root):
    if not os.path.isdir("/usr/local/cuda/include"):
        raise Skip("no CUDA toolkit")
    n, nodes, ranks = ARGS.kernels, ARGS.nodes, ARGS.ranks
    with sshfs.Mount(os.path.join(root, "fs")) as m:
        shared, src, out = tier_dirs(root, m)
        for i in range(n):
            with open(os.path.join(src, "k%d.cu" % i), "w") as f:
                f.write(KERNEL % (i, i + 2))
        with open(os.path.join(src, "warm.cu"), "w") as f:
            f.write(KERNEL % (999, 1))
        env = env_for(shared)
        # Seconds, not minutes, to a skip where the probe fails (see warm()).
        p = subprocess.run([KCACHE, "compile", os.path.join(src, "warm.cu"), "--arch", "sm_90",
                            "-o", os.path.join(out, "probe.cubin")], capture_output=True,
                           text=True, env=dict(env, KCACHE_DIR=os.path.join(root, "probe"),
                                               KCACHE_SHARED="none"))
        if "probe of NVRTC's environment failed" in p.stderr:
            raise Skip("NVRTC's environment probe failed (compile/nvenv.c: under ASan its fork "
                       "can hang), so compiles would run uncached; run this test with a build "
                       "without sanitizers")
        # Plain NVRTC's kernels: the cache off.
        ref = dict(env, KCACHE_DISABLE="1")
        for i in range(n):
            subprocess.run([KCACHE, "compile", os.path.join(src, "k%d.cu" % i), "--arch", "sm_90",
                            "-o", os.path.join(out, "ref-k%d.cubin" % i)], env=ref, check=True,
                           capture_output=True)
        # The first wave: every node's ranks at once; each node a script of its own that
        # starts its ranks together inside its namespaces.
        t0 = time.time()
        procs = []
        for j in range(nodes):
            name = "node%d" % j
            body = " & ".join("(%s)" % rank_script(src, out, name, r, n) for r in range(ranks))
            procs.append(node_process(name, warm(src, out, name) + body + " & wait", env))
        for p in procs:
            p.wait()
        wave = time.time() - t0
        if probe_failed(out):
            raise Skip("NVRTC's environment probe failed on %s (compile/nvenv.c: under ASan its "
                       "fork can hang), so every compile there ran uncached; run this test with "
                       "a build without sanitizers" % probe_failed(out))
        failed, misses, differ = [], collections.Counter(), []
        for j in range(nodes):
            for r in range(ranks):
                base = os.path.join(out, "node%d-%d" % (j, r))
                err = open(base + ".err").read()
                failed += [l for l in err.splitlines() if l.startswith("FAILED")]
                for line in open(base + ".out").read().splitlines():
                    f = line.split()
                    if f and f[0] in ("miss", "uncached"):
                        misses[("node%d" % j, f[2])] += 1
                for i in range(n):
                    got = open("%s-k%d.cubin" % (base, i), "rb").read()
                    if got != open(os.path.join(out, "ref-k%d.cubin" % i), "rb").read():
                        differ.append("node%d rank %d k%d" % (j, r, i))
        print("first wave: %d nodes x %d ranks x %d kernels in %.1f s, %d compiles"
              % (nodes, ranks, n, wave, sum(misses.values())))
        check(not failed, "0 failed commands: %s" % failed[:5])
        check(not differ, "every result equal to plain NVRTC's: %s" % differ[:5])
        twice = [k for k, c in misses.items() if c > 1]
        check(not twice, "each kernel compiled at most once per node: %s" % twice[:5])
        # A node that starts afterwards: its first process compiles nothing.
        late = (warm(src, out, "late") + "cd %s; for i in $(seq 0 %d); do %s compile k$i.cu --arch sm_90 -o %s/late-k$i.cubin"
                "; done; %s stats --json" % (src, n - 1, KCACHE, out, KCACHE))
        p = subprocess.run(sshfs.node("late", ["sh", "-c", late]), env=env, capture_output=True,
                           text=True)
        rows = [l.split() for l in p.stdout.splitlines() if l[:4] in ("hit ", "miss", "unca")]
        check(len(rows) == n and all(r[0] == "hit" for r in rows),
              "every kernel a hit on a later node: %s %s" % (rows, p.stderr))
        for i in range(n):
            check(open(os.path.join(out, "late-k%d.cubin" % i), "rb").read() ==
                  open(os.path.join(out, "ref-k%d.cubin" % i), "rb").read(),
                  "the late node's k%d is plain NVRTC's" % i)
        segs = os.listdir(os.path.join(shared, "segments"))
        print("shared directory: %d segments" % len(segs))


def test_compaction(root):
    """A publisher that finds KCACHE_TEST_SHARED_COMPACT_AT (3) segments merges them: the
    count stays bounded, the one-entry segments merged are gone, and a later node gets
    every kernel from the tier."""
    if not os.path.isdir("/usr/local/cuda/include"):
        raise Skip("no CUDA toolkit")
    n = 5
    with sshfs.Mount(os.path.join(root, "fs")) as m:
        shared, src, out = tier_dirs(root, m)
        for i in range(n):
            with open(os.path.join(src, "c%d.cu" % i), "w") as f:
                f.write(KERNEL % (100 + i, i + 3))
        env = dict(env_for(shared), KCACHE_TEST_SHARED_COMPACT_AT="3")
        loop = ("cd %s; for i in $(seq 0 %d); do %s compile c$i.cu --arch sm_90 -o %s/%%s-$i.cubin"
                "; done" % (src, n - 1, KCACHE, out))
        p = subprocess.run(sshfs.node("pub", ["sh", "-c", loop % "pub"]), env=env,
                           capture_output=True, text=True)
        if "probe of NVRTC's environment failed" in p.stderr:
            raise Skip("NVRTC's environment probe failed (compile/nvenv.c)")
        check(p.returncode == 0, "the publisher's compiles: %s" % p.stderr)
        segs = os.listdir(os.path.join(shared, "segments"))
        retired = os.listdir(os.path.join(shared, "retired"))
        print("after %d publishes: %d segments, %d retired" % (n, len(segs), len(retired)))
        check(len(segs) < 3, "fewer segments than the threshold: %s" % segs)
        check(any("-merged-n" in s for s in segs), "a merged segment: %s" % segs)
        check(not retired, "one-entry segments deleted once merged, not kept: %s" % retired)
        p = subprocess.run(sshfs.node("late", ["sh", "-c", loop % "late"]), env=env,
                           capture_output=True, text=True)
        rows = [l.split()[0] for l in p.stdout.splitlines() if l.strip()]
        check(rows == ["hit"] * n, "every kernel a hit on a later node: %s %s" % (rows, p.stderr))
        for i in range(n):
            check(open(os.path.join(out, "pub-%d.cubin" % i), "rb").read() ==
                  open(os.path.join(out, "late-%d.cubin" % i), "rb").read(), "c%d's bytes" % i)


def segment_reads(trace):
    """Opens of segments and reads of them, from strace -f -e openat,read,pread64,close."""
    opens = reads = 0
    fds = set()
    for line in open(trace):
        m = re.search(r'openat\(AT_FDCWD, "[^"]*/segments/[^"]*\.kcb", [^)]*\) = (\d+)', line)
        if m:
            opens += 1
            fds.add(m.group(1))
            continue
        m = re.search(r'\b(p?read(?:64)?|close)\((\d+)', line)
        if m and m.group(2) in fds:
            if m.group(1) == "close":
                fds.discard(m.group(2))
            else:
                reads += 1
    return opens, reads


def test_one_read(root):
    """A shared hit reads its segment over the network once: one open and a read or two,
    not SQLite's page reads (each a round trip on sshfs: two opens and 45 reads before),
    and leaves no copy behind in the node's cache directory; the segment, mostly its
    tables' root pages, has pages of 1 KiB (124 KiB before for a CUBIN of 3.5 KiB)."""
    if not os.path.isdir("/usr/local/cuda/include"):
        raise Skip("no CUDA toolkit")
    if not shutil.which("strace"):
        raise Skip("strace is not installed")
    with sshfs.Mount(os.path.join(root, "fs")) as m:
        shared, src, out = tier_dirs(root, m)
        for name, text in (("warm.cu", KERNEL % (98, 2)), ("one.cu", KERNEL % (97, 5))):
            with open(os.path.join(src, name), "w") as f:
                f.write(text)
        env = env_for(shared)
        p = subprocess.run(sshfs.node("pub", ["sh", "-c", "%s compile %s/one.cu --arch sm_90 -o "
                                              "%s/pub.cubin" % (KCACHE, src, out)]),
                           env=env, capture_output=True, text=True)
        check(p.returncode == 0, "the publisher's compile: %s" % p.stderr)
        seg = os.listdir(os.path.join(shared, "segments"))
        size = os.path.getsize(os.path.join(shared, "segments", seg[0]))
        print("a one-entry segment of a %d-byte CUBIN: %d bytes"
              % (os.path.getsize(os.path.join(out, "pub.cubin")), size))
        check(size <= 64 << 10, "a small segment is written with small pages")
        trace = os.path.join(out, "hit.strace")
        script = (warm(src, out, "reader") +
                  # LeakSanitizer cannot run under ptrace.
                  "ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 "
                  "strace -f -qq -e trace=openat,read,pread64,close -o %s %s compile %s/one.cu "
                  "--arch sm_90 -o %s/reader.cubin; ls /var/tmp/.cache/kcache"
                  % (trace, KCACHE, src, out))
        p = subprocess.run(sshfs.node("reader", ["sh", "-c", script]), env=env,
                           capture_output=True, text=True)
        if probe_failed(out):
            raise Skip("NVRTC's environment probe failed (compile/nvenv.c)")
        check(p.stdout.startswith("hit"), "a hit from the shared tier: %s %s" % (p.stdout, p.stderr))
        check(open(os.path.join(out, "pub.cubin"), "rb").read() ==
              open(os.path.join(out, "reader.cubin"), "rb").read(), "the published bytes")
        opens, reads = segment_reads(trace)
        print("the shared hit opened its segment %d times and read it %d times" % (opens, reads))
        check(opens == 1 and 1 <= reads <= 3, "one open and a read or two of the segment")
        check("shared-in-" not in p.stdout, "no copy left behind: %s" % p.stdout)


def test_fifo_segment(root):
    """A FIFO planted in the shared directory under a segment's name (newest, named for the
    key) is refused, and the real segment then serves the hit: the reader does not hang
    opening it. A local directory: no sshfs needed."""
    if not os.path.isdir("/usr/local/cuda/include"):
        raise Skip("no CUDA toolkit")
    shared, src = os.path.join(root, "shared"), os.path.join(root, "k.cu")
    os.makedirs(shared)
    with open(src, "w") as f:
        f.write(KERNEL % (96, 7))
    env = env_for(shared)
    p = subprocess.run([KCACHE, "compile", src, "--arch", "sm_90", "-o", src + ".pub"],
                       env=dict(env, KCACHE_DIR=os.path.join(root, "pub")),
                       capture_output=True, text=True)
    check(p.returncode == 0, "the publisher's compile: %s" % p.stderr)
    seg = os.listdir(os.path.join(shared, "segments"))
    check(len(seg) == 1, "one segment published: %s" % seg)
    os.mkfifo(os.path.join(shared, "segments", "9999999999999-evil-1-1" + seg[0][seg[0].rindex("-"):]))
    try:
        p = subprocess.run([KCACHE, "compile", src, "--arch", "sm_90", "-o", src + ".got"],
                           env=dict(env, KCACHE_DIR=os.path.join(root, "reader")),
                           capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        check(False, "the reader hung on the FIFO")
        return
    check(p.stdout.startswith("hit") and "is not a file" in p.stderr,
          "the FIFO refused, the segment's hit: %s %s" % (p.stdout, p.stderr))


def tier_files(shared):
    """Every file of the shared directory (its folders not counted)."""
    return [os.path.join(d, f) for d, _, fs in os.walk(shared) for f in fs]


def test_kills(root):
    """kcache processes SIGKILLed while they publish or compact (the threshold is 3, so
    most publishes compact; each victim is killed within 1 s of its first local work
    file of the tier appearing): every kernel a completed compile published is still
    served to a later node, no segment is refused, and once a compaction has run after
    the kills (grace 1 s) the tier's files are few again and no work file is left."""
    if not ARGS.kills:
        raise Skip("long mode only (--kills N)")
    import json
    import random
    import signal
    rnd = random.Random(36)
    with sshfs.Mount(os.path.join(root, "fs")) as m:
        shared, src, out = tier_dirs(root, m)
        local = os.path.join(root, "local")
        env = dict(env_for(shared), KCACHE_TEST_SHARED_COMPACT_AT="3",
                   KCACHE_TEST_SHARED_GRACE_S="1", KCACHE_DIR=local)

        def compile_x(i):
            name = os.path.join(src, "x%d.cu" % i)
            with open(name, "w") as f:
                f.write(KERNEL % (1000 + i, i + 5))
            return subprocess.Popen([KCACHE, "compile", name, "--arch", "sm_90", "-o",
                                     os.path.join(out, "x%d.cubin" % i)], env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

        def phase(pid):
            """What process pid does with the tier, by its local work files: or None."""
            tag = "-%d-" % pid
            for f in os.listdir(local) if os.path.isdir(local) else []:
                if tag in f and f.startswith("shared-compact-"):
                    return "compaction"
                if tag in f and f.startswith("shared-out-"):
                    return "publish"
            return None

        done, kills, i, most = [], collections.Counter(), 0, 0
        t0 = time.time()
        while sum(kills.values()) < ARGS.kills:
            p = compile_x(i)
            if i % 3 != 0:
                seen = None
                while p.poll() is None and not seen:
                    seen = phase(p.pid)
                    time.sleep(0.005)
                if seen:
                    time.sleep(rnd.uniform(0, 1.0))
                    seen = phase(p.pid) or seen
                    if p.poll() is None:
                        p.send_signal(signal.SIGKILL)
                        kills[seen] += 1
            o, _ = p.communicate()
            if p.returncode == 0 and o.startswith("miss"):
                done.append(i)
            most = max(most, len(tier_files(shared)))
            i += 1
        print("%d kills (%s) in %.0f s, %d completed publishes; files of the tier: at most %d, "
              "%d after the kills" % (sum(kills.values()), dict(kills), time.time() - t0,
                                      len(done), most, len(tier_files(shared))))
        # Compactions after the kills, past the grace (1 s) and the age at which an empty
        # lease is a dead one's (5 s): what the killed ones left is reclaimed.
        time.sleep(6)
        for j in range(i, i + 3):
            p = compile_x(j)
            o, _ = p.communicate()
            if p.returncode == 0 and o.startswith("miss"):
                done.append(j)
        files = tier_files(shared)
        left = [f for f in os.listdir(local) if f.startswith("shared-")]
        print("after 3 more compiles: %d files (%d segments, %d retired), %d local work files"
              % (len(files), len(os.listdir(os.path.join(shared, "segments"))),
                 len(os.listdir(os.path.join(shared, "retired"))), len(left)))
        check(len(files) <= 16, "the tier's files bounded after the kills: %s" % files)
        check(not [f for f in files if ".tmp-" in f], "no killed writer's copy left: %s" % files)
        check(not left, "no killed process's local work file left: %s" % left)
        late = dict(env, KCACHE_DIR=os.path.join(root, "late"))
        misses = []
        for k in done:
            p = subprocess.run([KCACHE, "compile", os.path.join(src, "x%d.cu" % k), "--arch",
                                "sm_90", "-o", os.path.join(out, "late%d.cubin" % k)], env=late,
                               capture_output=True, text=True)
            if not p.stdout.startswith("hit"):
                misses.append((k, p.stdout, p.stderr))
        check(not misses, "every completed publish served later: %s" % misses[:3])
        st = subprocess.run([KCACHE, "stats", "--json"], env=late, capture_output=True,
                            text=True).stdout
        check(json.loads(st)["shared"]["rejected"] == 0, "no segment refused: %s" % st)


if __name__ == "__main__":
    sys.exit(run_tests(globals()))

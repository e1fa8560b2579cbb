#!/usr/bin/env python3
"""The shared tier, measured.

1. One request served four ways, as `kcache compile --json` reports the call's
   own time (elapsed_ms; process start not included): NVRTC (a miss, no
   remote), a local hit, a remote hit on loopback (a fresh cache each time,
   so the entry comes from Redis, is checked and stored locally).
2. A fleet: N caches (default 4, standing for machines) on one redis-server
   compile the same kernels at once, in parallel; then the same without the
   remote. Reported: NVRTC runs per key (misses summed over the caches) and
   the wall time until every cache has every kernel.

Usage: bench_remote.py --kcache build/cli/kcache [--kernels DIR] [--caches 4]
       [--rounds 15] [--json FILE]
Kernels: DIR/saxpy.cu, tiled_gemm.cu, block_sort.cu (the examples; $CORPUS
when no --kernels); without them, generated kernels. Starts its own
redis-server on a free loopback port (exit 77 when it cannot).
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

CCCL = "/usr/local/cuda/include/cccl"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(root):
    port = free_port()
    conf = os.path.join(root, "redis.conf")
    with open(conf, "w") as f:
        f.write("bind 127.0.0.1\nport %d\nsave \"\"\nappendonly no\ndir %s\n"
                "maxmemory 256mb\nmaxmemory-policy allkeys-lru\n" % (port, root))
    redis = shutil.which("redis-server")
    if not redis:
        print("skip: redis-server is not installed")
        sys.exit(77)
    proc = subprocess.Popen([redis, conf], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, "redis://127.0.0.1:%d" % port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    print("skip: redis-server did not start")
    sys.exit(77)


def flush(url):
    host, port = url[len("redis://"):].split(":")
    with socket.create_connection((host, int(port))) as s:
        s.sendall(b"*1\r\n$8\r\nFLUSHALL\r\n")
        s.recv(64)


def env_for(root, name, remote):
    e = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    e.update({"KCACHE_DIR": os.path.join(root, name), "NO_COLOR": "1"})
    if remote:
        e["KCACHE_REMOTE"] = remote
    return e


def kernels(args, root):
    d = args.kernels or os.environ.get("CORPUS", "")
    out = []
    for name, extra in (("saxpy.cu", []), ("tiled_gemm.cu", []),
                        ("block_sort.cu", ["-I", CCCL, "--std", "c++17"])):
        if d and os.path.exists(os.path.join(d, name)):
            out.append((os.path.join(d, name), extra))
    if out:
        return out, "examples from %s" % d
    for i in range(3):
        p = os.path.join(root, "gen%d.cu" % i)
        with open(p, "w") as f:
            f.write('extern "C" __global__ void g%d(float *x) { x[threadIdx.x] += %d; }\n'
                    % (i, i))
        out.append((p, []))
    return out, "generated kernels (no examples found)"


def compile_ms(kcache, env, src, extra):
    p = subprocess.run([kcache, "compile", src, "--arch", "sm_90", "--json"] + extra,
                       env=env, capture_output=True, timeout=600)
    if p.returncode != 0:
        raise SystemExit("kcache compile failed: %s" % p.stderr.decode())
    item = json.loads(p.stdout)["items"][0]
    return item["elapsed_ms"], item


def one_request(args, root, url, src, extra):
    nvrtc, local, remote = [], [], []
    for i in range(args.rounds):
        flush(url)
        ms, item = compile_ms(args.kcache, env_for(root, "nv%d" % i, None), src, extra)
        assert not item["hit"]
        nvrtc.append(ms)
        ms, item = compile_ms(args.kcache, env_for(root, "nv%d" % i, None), src, extra)
        assert item["hit"]
        local.append(ms)
        compile_ms(args.kcache, env_for(root, "push%d" % i, url), src, extra)
        ms, item = compile_ms(args.kcache, env_for(root, "pull%d" % i, url), src, extra)
        assert item["remote_hit"], item
        remote.append(ms)
    return {k: statistics.median(v) for k, v in
            (("nvrtc_ms", nvrtc), ("local_hit_ms", local), ("remote_hit_ms", remote))}


def fleet(args, root, url, ks, tag):
    """N caches compile every kernel at once; returns (NVRTC runs, wall seconds)."""
    if url:
        flush(url)
    t0 = time.monotonic()
    procs = []
    for c in range(args.caches):
        e = env_for(root, "%s%d" % (tag, c), url)
        # Each machine compiles the kernels one after the other, starting at a
        # different one, as CI runners given the same job list would.
        order = ks[c % len(ks):] + ks[:c % len(ks)]
        script = " && ".join(
            " ".join([args.kcache, "compile", "-q", src, "--arch", "sm_90"] + extra)
            for src, extra in order)
        procs.append(subprocess.Popen(["sh", "-c", script], env=e))
    for p in procs:
        if p.wait(timeout=1800) != 0:
            raise SystemExit("a fleet compile failed")
    wall = time.monotonic() - t0
    misses = 0
    for c in range(args.caches):
        p = subprocess.run([args.kcache, "stats", "--json"],
                           env=env_for(root, "%s%d" % (tag, c), url), capture_output=True)
        misses += json.loads(p.stdout)["misses"]
    return misses, wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kcache", required=True)
    ap.add_argument("--kernels")
    ap.add_argument("--caches", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--json")
    args = ap.parse_args()
    args.kcache = os.path.abspath(args.kcache)
    root = tempfile.mkdtemp(prefix="kcache-bench-remote-")
    proc, url = start_redis(root)
    try:
        ks, where = kernels(args, root)
        src, extra = ks[0]
        single = one_request(args, root, url, src, extra)
        with_remote = fleet(args, root, url, ks, "fr")
        without = fleet(args, root, None, ks, "fl")
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(root, ignore_errors=True)
    n = len(ks)
    print("kernels: %s; %d rounds; redis on loopback; %d CPUs" % (where, args.rounds,
                                                                 os.cpu_count()))
    print("\none request (%s, sm_90), median kcache_compiler_compile time:" % os.path.basename(src))
    print("  NVRTC (miss)            %9.2f ms" % single["nvrtc_ms"])
    print("  local hit               %9.2f ms" % single["local_hit_ms"])
    print("  remote hit (loopback)   %9.2f ms" % single["remote_hit_ms"])
    print("\nfleet: %d caches compiling %d kernels at once" % (args.caches, n))
    print("  %-16s %12s %16s %10s" % ("", "NVRTC runs", "runs per key", "wall s"))
    print("  %-16s %12d %16.2f %10.2f" % ("with remote", with_remote[0], with_remote[0] / n,
                                          with_remote[1]))
    print("  %-16s %12d %16.2f %10.2f" % ("without remote", without[0], without[0] / n,
                                          without[1]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"kernels": where, "single": single, "caches": args.caches,
                       "keys": n,
                       "fleet_remote": {"nvrtc_runs": with_remote[0], "wall_s": with_remote[1]},
                       "fleet_local": {"nvrtc_runs": without[0], "wall_s": without[1]}},
                      f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

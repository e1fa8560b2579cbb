#!/usr/bin/env python3
"""On a GPU machine: CuPy and cuda.core under `kcache run` keep the NVRTC
they load themselves (pip's nvidia/cu13, through cuda.pathfinder), not the
system toolkit's.

    python3 benchmarks/gpu/own_nvrtc.py --kcache .dev/gpu/bin/kcache [--json OUT]

Each program runs as a fresh process without kcache, then twice under
`kcache run -v` (a cold cache, then a warm one): the NVRTC version it
reports, the PTX cuda.core compiles and CuPy's kernel results must be the
same in all three, and `-v` must name the library the program loaded
without kcache (read from its /proc/self/maps). Exit 1 when one differs,
77 without CuPy or cuda.core.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

PROGRAM = r'''
import hashlib, json, sys
import cupy as cp
from cuda.core import Device, Program, ProgramOptions
from cuda.bindings import nvrtc
Device().set_current()
err, major, minor = nvrtc.nvrtcVersion()
src = 'extern "C" __global__ void axpy(float a, const float *x, float *y, int n)' \
      '{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] += a * x[i]; }'
ptx = Program(src, "c++", ProgramOptions(arch="compute_90")).compile("ptx").code
k = cp.RawKernel(src, "axpy")
x = cp.arange(1024, dtype=cp.float32)
y = cp.ones(1024, dtype=cp.float32)
k((4,), (256,), (cp.float32(2.0), x, y, cp.int32(1024)))
s = float(cp.sum(y)) + float(cp.sum(cp.sqrt(x)))
maps = sorted({l[l.find("/"):].strip() for l in open("/proc/self/maps")
               if "/libnvrtc" in l and "builtins" not in l})
builtins = sorted({l[l.find("/"):].strip() for l in open("/proc/self/maps")
                   if "libnvrtc-builtins" in l})
json.dump({"version": "%d.%d" % (major, minor),
           "ptx": hashlib.sha256(ptx if isinstance(ptx, bytes) else ptx.encode()).hexdigest(),
           "sum": s, "nvrtc_maps": maps, "builtins": builtins}, open(sys.argv[1], "w"))
'''


def run(cmd, env, out):
    p = subprocess.run(cmd + [sys.executable, "-c", PROGRAM, out], env=env, capture_output=True,
                       text=True, timeout=600)
    if p.returncode:
        sys.exit("failed (%d): %s\n%s" % (p.returncode, " ".join(cmd), p.stderr[-3000:]))
    with open(out) as f:
        return json.load(f), p.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kcache", required=True)
    ap.add_argument("--json")
    a = ap.parse_args()
    try:
        import cupy  # noqa: F401
        import cuda.core  # noqa: F401
    except ImportError as e:
        print("skip: %s" % e)
        return 77
    tmp = tempfile.mkdtemp(prefix="own-nvrtc-")
    env = dict(os.environ, CUDA_CACHE_DISABLE="1", CUPY_CACHE_IN_MEMORY="1",
               KCACHE_DIR=os.path.join(tmp, "cache"))
    plain, _ = run([], env, os.path.join(tmp, "plain.json"))
    rows = [("plain", plain, "")]
    for name in ("kcache cold", "kcache warm"):
        got, err = run([a.kcache, "run", "-v", "--"], env, os.path.join(tmp, name[7:] + ".json"))
        rows.append((name, got, err))
    ok = True
    for name, got, err in rows:
        forwarded = [l.split(" nvrtc-path ", 1)[1] for l in err.splitlines() if " nvrtc-path " in l]
        print("%-12s NVRTC %s  ptx %s  sum %.3f  maps %s  builtins %s  forwarded-to %s"
              % (name, got["version"], got["ptx"][:16], got["sum"], got["nvrtc_maps"],
                 got["builtins"], forwarded))
        if name != "plain":
            same = all(got[k] == plain[k] for k in ("version", "ptx", "sum"))
            ok &= same
            ok &= all(os.path.realpath(f) in [os.path.realpath(m) for m in plain["nvrtc_maps"]]
                      for f in forwarded if f != "-")
            # The program's own builtins, never the toolkit's, whenever NVRTC was loaded.
            ok &= all(b in plain["builtins"] for b in got["builtins"])
    print("own NVRTC kept: %s" % ("yes" if ok else "NO"))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({n: {"result": g, "stderr": e[-2000:]} for n, g, e in rows}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

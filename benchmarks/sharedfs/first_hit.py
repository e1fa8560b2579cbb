#!/usr/bin/env python3
"""A first hit from the shared tier against a local first hit, as whole
`kcache compile` processes on a node (own hostname, own /var/tmp) whose
shared directory is on sshfs over loopback (tests/pyhelp/sshfs.py).

For each of ROUNDS kernels of about 64 KiB of CUBIN (distinct keys): another
node compiles and publishes it; then on the measured node (its cache warm,
the key not in it) one process takes it from the shared tier (local miss,
shared hit, filled locally) and the next process hits it locally. Prints
the medians and their ratio.

Usage: first_hit.py KCACHE [--rounds N]   (root, FUSE, sshfs, a toolkit)
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "pyhelp"))
import sshfs  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("kcache")
ap.add_argument("--rounds", type=int, default=7)
ARGS = ap.parse_args()
KCACHE = os.path.abspath(ARGS.kcache)

FN = ('extern "C" __global__ void f%d_%d(float *x, const float *y, int n) {\n'
      '  int t = blockIdx.x * blockDim.x + threadIdx.x;\n  float a = y[t];\n#pragma unroll\n'
      '  for (int j = 0; j < 32; j++) a = a * %d.5f + y[(t + j) %% n];\n  x[t] = a;\n}\n')


def kernel(r):
    return "".join(FN % (r, i, i + r + 1) for i in range(7))


def main():
    root = tempfile.mkdtemp(prefix="kcache-bench-shared-")
    with sshfs.Mount(os.path.join(root, "fs")) as m:
        shared = os.path.join(m.mnt, "shared")
        os.makedirs(shared)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/var/tmp",
               "KCACHE_SHARED": shared}
        src = os.path.join(root, "src")
        os.makedirs(src)
        for r in range(ARGS.rounds):
            with open(os.path.join(src, "big%d.cu" % r), "w") as f:
                f.write(kernel(r))
        with open(os.path.join(src, "warm.cu"), "w") as f:
            f.write(FN % (99, 0, 1))
        compile_all = "; ".join("%s compile %s/big%d.cu --arch sm_90 -o %s/pub%d.cubin >/dev/null"
                                % (KCACHE, src, r, root, r) for r in range(ARGS.rounds))
        subprocess.run(sshfs.node("publisher", ["sh", "-c", compile_all]), env=env, check=True)
        size = os.path.getsize(os.path.join(root, "pub0.cubin"))
        # The measured node: warm (NVRTC's environment probed), then per kernel a shared
        # first hit and a local first hit, each a whole process timed by the shell.
        lines = ["%s compile %s/warm.cu --arch sm_90 -o %s/w.cubin >/dev/null 2>&1"
                 % (KCACHE, src, root)]
        for r in range(ARGS.rounds):
            for what in ("shared", "local"):
                lines.append('a=$(date +%%s%%N); %s compile %s/big%d.cu --arch sm_90 -o %s/%s%d.cubin '
                             '> %s/%s%d.out; b=$(date +%%s%%N); echo %s $((b - a))'
                             % (KCACHE, src, r, root, what, r, root, what, r, what))
        p = subprocess.run(sshfs.node("measured", ["sh", "-c", "; ".join(lines)]), env=env,
                           capture_output=True, text=True, check=True)
    times = {"shared": [], "local": []}
    for line in p.stdout.split("\n"):
        if line.strip():
            what, ns = line.split()
            times[what].append(int(ns) / 1e6)
    for r in range(ARGS.rounds):
        for what in ("shared", "local"):
            out = open(os.path.join(root, "%s%d.out" % (what, r))).read()
            assert out.startswith("hit"), (what, r, out)
            assert open(os.path.join(root, "%s%d.cubin" % (what, r)), "rb").read() == open(
                os.path.join(root, "pub%d.cubin" % r), "rb").read()
    sh, lo = statistics.median(times["shared"]), statistics.median(times["local"])
    print("CUBIN %d bytes, %d rounds" % (size, ARGS.rounds))
    print("shared first hit (local miss, shared hit, filled): median %.1f ms  (%s)"
          % (sh, ", ".join("%.0f" % t for t in times["shared"])))
    print("local first hit:                                   median %.1f ms  (%s)"
          % (lo, ", ".join("%.0f" % t for t in times["local"])))
    print("ratio %.2fx" % (sh / lo))
    subprocess.run(["rm", "-rf", root])


if __name__ == "__main__":
    main()

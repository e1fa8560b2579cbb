#!/usr/bin/env python3
"""NVRTC's environment probe (lib/compile/nvenv.c) is run once per cache,
not once per process that starts with it: the ranks of a node starting
together on a fresh cache probe once, the others wait and read its record.

Observed by CPU time (each process's own with its waited-for children, the
probe's fork among them): a probe costs several compiles of a small kernel,
so four processes that each probe cost about four times one process, and
four that share one probe cost little more than one.

Usage: test_probe.py KCACHE   (exit 77 without a toolkit)
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pyhelp"))
from kctest import Skip, check, run_tests  # noqa: E402

KCACHE = os.path.abspath(sys.argv[1])
KERNEL = 'extern "C" __global__ void p%d(float *x) { x[threadIdx.x] *= %d.0f; }\n'


def cold(root, name, n):
    """n `kcache compile` processes started at once on a fresh cache: their CPU seconds."""
    cache = os.path.join(root, name)
    env = dict(os.environ, KCACHE_DIR=cache)
    procs = []
    for i in range(n):
        src = os.path.join(root, "%s%d.cu" % (name, i))
        with open(src, "w") as f:
            f.write(KERNEL % (i, i + 2))
        procs.append(subprocess.Popen([KCACHE, "compile", src, "--arch", "sm_90", "-o",
                                       src + ".cubin"], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    cpu, rows = 0.0, []
    for p in procs:
        out, err = p.stdout.read(), p.stderr.read()
        _, status, ru = os.wait4(p.pid, 0)
        cpu += ru.ru_utime + ru.ru_stime
        check(os.waitstatus_to_exitcode(status) == 0, "kcache compile: %s" % err)
        if "probe of NVRTC's environment failed" in err:
            raise Skip("the probe fails here (under ASan its fork can hang): %s" % err.strip())
        rows.append(out.split()[0])
    check(rows == ["miss"] * n, "every compile stored, none uncached: %s" % rows)
    return cpu


def test_ranks_probe_once(root):
    if not os.path.isdir("/usr/local/cuda/include"):
        raise Skip("no CUDA toolkit")
    one = cold(root, "one", 1)
    four = cold(root, "four", 4)
    print("CPU: one process %.2f s, four at once %.2f s (%.1fx)" % (one, four, four / one))
    check(four < 2.5 * one, "four processes of a fresh cache probe once: %.2f s of CPU "
          "against %.2f s for one" % (four, one))


if __name__ == "__main__":
    sys.exit(run_tests(globals()))

#!/usr/bin/env python3
"""A 9-file 'kcache compile' in a real terminal (tmux): results stream as
they finish, above a progress line that names the items being compiled and
an estimate of the time left; piped, the same command prints no progress.

Usage: test_progress_tmux.py KCACHE
Exits 77 (skipped) without tmux or without a toolkit that compiles.

The kernels include CUB so that each takes about a second to compile: the
test samples the pane while the command runs and needs to catch it between
two results. What it asserts does not depend on the timing, only that some
sample falls inside the run, which at ten samples a second for several
seconds always happens.
"""
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

KCACHE = os.path.abspath(sys.argv[1])
CCCL = "/usr/local/cuda/include/cccl"
KERNEL = """#include <cub/block/block_reduce.cuh>
template <int BLOCK> __global__ void reduce%d(const int *in, int *out)
{
    using R = cub::BlockReduce<int, BLOCK>;
    __shared__ typename R::TempStorage tmp;
    int v = R(tmp).Sum(in[blockIdx.x * BLOCK + threadIdx.x]);
    if (threadIdx.x == 0)
        out[blockIdx.x] = v;
}
template __global__ void reduce%d<128>(const int *, int *);
"""


def tmux(*args, check=True):
    return subprocess.run(["tmux", "-L", SOCKET] + list(args), capture_output=True, text=True,
                          check=check)


def main():
    global SOCKET
    if not shutil.which("tmux"):
        print("skipped: tmux is not installed")
        return 77
    if not os.path.isdir(CCCL):
        print("skipped: no CCCL headers at %s" % CCCL)
        return 77
    root = tempfile.mkdtemp(prefix="kcache-tmux-")
    SOCKET = "kcache-test-%d" % os.getpid()
    try:
        files = []
        for i in range(9):
            path = os.path.join(root, "reduce%d.cu" % i)
            with open(path, "w") as f:
                f.write(KERNEL % (i, i))
            files.append(path)
        env = dict(os.environ, KCACHE_DIR=os.path.join(root, "cache"), NO_COLOR="1")
        probe = subprocess.run([KCACHE, "compile", files[0], "--arch", "sm_90", "--no-cache",
                                "-q", "-I", CCCL, "--std", "c++17"], capture_output=True,
                               env=env)
        if probe.returncode != 0:
            print("skipped: kcache cannot compile here: %s" % probe.stderr.decode().strip())
            return 77
        # Piped: no progress, rows in the order given, all at the end.
        piped = subprocess.run([KCACHE, "compile"] + files + ["--arch", "sm_90", "-j", "2",
                               "--no-cache", "-I", CCCL, "--std", "c++17"],
                               capture_output=True, env=env)
        if piped.returncode != 0 or piped.stderr:
            print("FAIL piped: exit %d, stderr %r" % (piped.returncode, piped.stderr))
            return 1
        order = [l.split()[2] for l in piped.stdout.decode().splitlines()]
        if order != files:
            print("FAIL piped rows not in the order given: %s" % order)
            return 1

        done = os.path.join(root, "done")
        words = ["env", "KCACHE_DIR=%s" % env["KCACHE_DIR"], "NO_COLOR=1", KCACHE, "compile"] + \
            files + ["--arch", "sm_90", "-j", "2", "--no-cache", "-I", CCCL, "--std", "c++17"]
        command = " ".join(shlex.quote(w) for w in words) + "; touch " + shlex.quote(done)
        tmux("new-session", "-d", "-x", "160", "-y", "40", "-s", "k", "sh")
        tmux("send-keys", "-t", "k", "clear; " + command, "Enter")
        samples = []
        deadline = time.monotonic() + 300
        while not os.path.exists(done) and time.monotonic() < deadline:
            samples.append(tmux("capture-pane", "-p", "-t", "k").stdout)
            time.sleep(0.1)
        final = tmux("capture-pane", "-p", "-t", "k").stdout
        if not os.path.exists(done):
            print("FAIL the compile did not finish in 300 s")
            return 1

        def result_rows(text):
            return [l for l in text.splitlines() if l.startswith("miss ") or
                    l.startswith("uncached ")]

        def progress_lines(text):
            return [l for l in text.splitlines() if l.startswith("kcache: compiling ")]

        streaming = [s for s in samples if 0 < len(result_rows(s)) < 9 and progress_lines(s)]
        if not streaming:
            print("FAIL no sample shows some results above a progress line; last samples:")
            for s in samples[-3:]:
                print(s)
            return 1
        shown = streaming[len(streaming) // 2]
        line = progress_lines(shown)[-1]
        print("a sample from the middle of the run:\n" + "\n".join(
            l for l in shown.splitlines() if l.strip()))
        if "reduce" not in line or ".cu" not in line:
            print("FAIL the progress line names no current item: %r" % line)
            return 1
        if "left" not in line:
            print("FAIL the progress line gives no estimate: %r" % line)
            return 1
        if "/9" not in line:
            print("FAIL the progress line gives no count: %r" % line)
            return 1
        if len(result_rows(final)) != 9 or progress_lines(final):
            print("FAIL at the end, nine rows and no progress line:\n%s" % final)
            return 1
        print("ok   streaming results and a progress line under tmux")
        return 0
    finally:
        tmux("kill-server", check=False)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

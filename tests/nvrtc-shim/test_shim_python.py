#!/usr/bin/env python3
"""The drop-in NVRTC under Python's cuda.bindings.nvrtc, compared call by call.

As test_shim.py, through NVIDIA's Python bindings (pip cuda-bindings), which
load NVRTC with cuda.pathfinder (dlopen by name or full path). The virtual
environment is $SHIM_VENV; it is created here if it is missing (.ci/run
creates it up front). Skips (77) when pip cannot install cuda-bindings.

test_shim_python.py                     the test
test_shim_python.py --calls OUT INCLUDE run the cases (inside the venv)
"""
import filecmp
import os
import subprocess
import sys
import tempfile
import threading

from shim_report import read_report  # beside this script

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pyhelp"))
import kctest  # noqa: E402

SAXPY = b"""extern "C" __global__ void saxpy(float a, const float *x, float *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + y[i];
}
"""
TMPL = (b"template <typename T, int N> __global__ void scale(T *p) { p[threadIdx.x] *= N; }\n"
        b"__device__ float gain;\n")


def cases(include):
    inc = b"-I" + include.encode()
    return [
        dict(name=b"saxpy.cu", src=SAXPY, opts=[b"-arch=sm_90"]),
        dict(name=b"names.cu", src=TMPL, opts=[b"--gpu-architecture=sm_90", b"-std=c++17"],
             exprs=[b"scale<float, 2>", b"scale<int, 3>", b"&gain"]),
        dict(name=b"memory.cu",
             src=b'#include "vec.h"\n__global__ void k(float *p) { p[0] = twice(p[1]); }\n',
             headers=[b"#pragma once\n__device__ float twice(float x) { return 2 * x; }\n"],
             names=[b"vec.h"], opts=[b"-arch=sm_90"]),
        dict(name=b"include_dir.cu",
             src=b"#include <shim_axpb.h>\n__global__ void k(float *p) { p[0] = axpb(p[1], "
                 b"p[2], p[3]); }\n", opts=[b"-arch=sm_90", inc, b"-lineinfo"]),
        dict(name=b"broken.cu", src=b"__global__ void k(int *p) { p[0] = undeclared; }\n",
             opts=[b"-arch=sm_90"]),
        dict(name=b"ptx.cu", src=SAXPY, opts=[b"-arch=compute_90"]),
        dict(name=b"lto.cu", src=SAXPY, opts=[b"-arch=sm_90", b"-dlto"]),
    ]


THREAD_CASES = [
    dict(name=b"thread_a.cu", src=SAXPY + b"__global__ void a(int *p) { p[0] = 1; }\n",
         opts=[b"-arch=sm_90"]),
    dict(name=b"thread_b.cu", src=TMPL, opts=[b"-arch=sm_90"], exprs=[b"scale<double, 4>"]),
]


def run_case(nvrtc, c):
    rec = []
    put = rec.append
    put(b"== " + c["name"] + b"\n")
    headers, names = c.get("headers", []), c.get("names", [])
    err, p = nvrtc.nvrtcCreateProgram(c["src"], c["name"], len(headers), headers, names)
    put(b"create %d\n" % int(err))
    for e in c.get("exprs", []):
        put(b"add %s %d\n" % (e, int(nvrtc.nvrtcAddNameExpression(p, e)[0])))
    put(b"compile %d\n" % int(nvrtc.nvrtcCompileProgram(p, len(c["opts"]), c["opts"])[0]))
    for what in ("ProgramLog", "CUBIN", "LTOIR", "OptiXIR", "PTX"):
        err, n = getattr(nvrtc, "nvrtcGet%sSize" % what)(p)
        put(b"%s size %d %d\n" % (what.encode(), int(err), n))
        if int(err) == 0 and n:
            buf = b" " * n
            err2 = getattr(nvrtc, "nvrtcGet%s" % what)(p, buf)[0]
            put(b"%s %d\n" % (what.encode(), int(err2)) + buf + b"\n")
    for e in c.get("exprs", []) + [b"never_added<int>"]:
        err, lowered = nvrtc.nvrtcGetLoweredName(p, e)
        put(b"lowered %s %d %s\n" % (e, int(err), lowered or b"-"))
    put(b"destroy %d\n" % int(nvrtc.nvrtcDestroyProgram(p)[0]))
    return b"".join(rec)


def calls(out, include):
    from cuda.bindings import nvrtc
    skip = os.environ.get("NVRTC_CALLS_SKIP", "").encode()
    recs = [b"version %r\n" % (tuple(int(v) for v in nvrtc.nvrtcVersion()),)]
    recs += [run_case(nvrtc, c) for c in cases(include) if c["name"] != skip]
    results = [None, None]

    def worker(i):
        results[i] = run_case(nvrtc, THREAD_CASES[i])

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with open(out, "wb") as f:
        f.write(b"".join(recs + results))
    return 0


# ---- the test --------------------------------------------------------------

N_CASES = 9


check = kctest.Tally()  # every check printed; the run goes on after a failure


def venv_python():
    return kctest.venv_python(os.environ["SHIM_VENV"], ["cuda-bindings>=13,<14"],
                              ["cuda.bindings.nvrtc"])



def main():
    kcache = os.environ["KCACHE_EXE"]
    include = os.environ["SHIM_INCLUDE"]
    py = venv_python()
    shim = subprocess.run([kcache, "run", "--print-shim"], capture_output=True, text=True,
                          check=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="kcache-shim-py-") as tmp:
        env = dict(os.environ, KCACHE_DIR=os.path.join(tmp, "cache"))
        for k in ("KCACHE_PATH", "KCACHE_DISABLE", "KCACHE_NVRTC_REAL", "LD_PRELOAD"):
            env.pop(k, None)
        shim_dir = os.path.realpath(os.path.dirname(shim))
        kctest.drop_lib_dirs(env, lambda d: os.path.realpath(d) == shim_dir)
        ldd = subprocess.run(["ldd", shim], capture_output=True, text=True).stdout
        asan = [w for w in ldd.split() if "libasan" in w and w.startswith("/")]
        run_env = dict(env, KCACHE_NVRTC_REPORT=os.path.join(tmp, "report"))
        if asan:
            # A drop-in built with ASan in a Python that is not: the runtime goes in first.
            run_env["LD_PRELOAD"] = asan[0]
            run_env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") +
                                       ":verify_asan_link_order=0:detect_leaks=0")
        rep = run_env["KCACHE_NVRTC_REPORT"]

        def run(out, e, wrap=()):
            argv = list(wrap) + [py, os.path.abspath(__file__), "--calls", out, include]
            p = subprocess.run(argv, env=e, capture_output=True, text=True)
            if p.returncode:
                print(p.stdout, p.stderr)
            check(p.returncode == 0, "python cuda.bindings run exits 0")

        j = lambda n: os.path.join(tmp, n)  # noqa: E731
        real_env = dict(env, KCACHE_NVRTC_REPORT=rep)
        run(j("real.bin"), real_env)
        check(not read_report(rep), "the reference run is NVIDIA's library, not the drop-in")
        run(j("miss.bin"), run_env, [kcache, "run", "--"])
        r = read_report(rep)
        check(filecmp.cmp(j("real.bin"), j("miss.bin"), shallow=False),
              "first process (misses): every answer as NVIDIA's")
        check(len(r) == 1 and r[0]["hits"] == 0 and r[0]["misses"] == N_CASES,
              f"first process: 0 hits, {N_CASES} misses (report {r})")
        run(j("hit.bin"), run_env, [kcache, "run", "--"])
        r = read_report(rep)
        check(filecmp.cmp(j("real.bin"), j("hit.bin"), shallow=False),
              "second process (hits): every answer as NVIDIA's")
        check(len(r) == 1 and r[0]["hits"] == N_CASES - 1 and r[0]["misses"] == 1,
              f"second process: {N_CASES - 1} hits, the compile error a miss (report {r})")
        stats = subprocess.run([kcache, "stats"], env=env, capture_output=True, text=True).stdout
        print(stats)
    return check.status()


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--calls":
        sys.exit(calls(sys.argv[2], sys.argv[3]))
    sys.exit(main())

#!/usr/bin/env python3
"""NVIDIA's NVRTC keeps -restrict: no kernel made after it is filed for other processes.

test_restrict.py KCACHE DRIVER SHIM

NVRTC 13.0 applies -restrict to every compile of a process after the first
one that asked for it (found by the long harness: its long-lived drivers
compiled the "options" kind's -restrict, and later kernels of other kinds
came out with their pointers restricted). A kernel compiled then, without
-restrict in its options, is not what those options give in another
process. Through the library and through the drop-in, in one process that
asked for -restrict once: every later answer is what NVIDIA's NVRTC gives in
a process in the same state, and nothing of it is served to a second
process, which must get what NVRTC gives there.
"""
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import Driver  # noqa: E402

KCACHE, DRIVER, SHIM = (os.path.abspath(a) for a in sys.argv[1:4])

# Enough float arithmetic through pointers that restrict changes the CUBIN.
KERNEL = r'''extern "C" __global__ void k(float *o, const float *a, int n) {
  float s = 0;
  for (int i = 0; i < n; i++) s += sqrtf(a[i]) / a[i + 1] * a[i + 2] + expf(a[i]);
  o[threadIdx.x] = s;
  o[1] = o[0] * 2;
}
'''
OTHER = 'extern "C" __global__ void other(int *o) { o[0] = 3; }\n'
CFG = {"arch": "sm_90", "kind": "cubin"}

failures = []


def check(ok, what):
    print("%s: %s" % ("ok" if ok else "FAIL", what))
    if not ok:
        failures.append(what)


def env(tmp, dropin):
    e = dict(os.environ)
    for k in ("KCACHE_DISABLE", "KCACHE_REMOTE", "KCACHE_NVRTC_REAL", "LD_PRELOAD"):
        e.pop(k, None)
    e["KCACHE_DIR"] = os.path.join(tmp, "cache")
    e["KCACHE_TEST_CLOCK_SHIFT_NS"] = "10000000000"
    e["ASAN_OPTIONS"] = e.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"
    shim_dir = os.path.realpath(os.path.dirname(SHIM))
    e["LD_LIBRARY_PATH"] = ":".join(d for d in e.get("LD_LIBRARY_PATH", "").split(":")
                                    if d and os.path.realpath(d) != shim_dir)
    if dropin:
        e["LD_PRELOAD"] = SHIM
    return e


def compile_in(driver, mode, tmp, name, opts):
    return driver.compile(mode, tmp, os.path.join(tmp, name), opts, [], CFG)


def main():
    tmp = tempfile.mkdtemp(prefix="kcache restrict-")
    try:
        for name, text in (("k.cu", KERNEL), ("other.cu", OTHER)):
            with open(os.path.join(tmp, name), "w") as f:
                f.write(text)
        # NVIDIA's NVRTC alone: a fresh process, one after -restrict, -restrict given.
        ref = Driver(DRIVER, env(tmp, False))
        clean = compile_in(ref, "nvrtc", tmp, "k.cu", [])
        ref.close()
        if not clean.ok():
            print("SKIP: NVIDIA's NVRTC cannot compile here (%s)" % clean.message)
            return 77
        ref = Driver(DRIVER, env(tmp, False))
        compile_in(ref, "nvrtc", tmp, "other.cu", ["-restrict"])
        after = compile_in(ref, "nvrtc", tmp, "k.cu", [])
        ref.close()
        ref = Driver(DRIVER, env(tmp, False))
        given = compile_in(ref, "nvrtc", tmp, "k.cu", ["-restrict"])
        ref.close()
        check(given.ptx != clean.ptx, "-restrict changes this kernel's CUBIN")
        print("NVIDIA's NVRTC keeps -restrict for later compiles: %s" %
              ("yes" if after.ptx == given.ptx else "no (this build does not)"))

        # NVRTC strips white space around an option: " --restrict " is -restrict too.
        for mode, dropin, spelling in (("lib", False, "-restrict"), ("nvrtc", True, "-restrict"),
                                       ("nvrtc", True, " --restrict ")):
            path = "drop-in" if dropin else "library"
            path += "" if spelling == "-restrict" else " (%r)" % spelling
            shutil.rmtree(os.path.join(tmp, "cache"), ignore_errors=True)
            first = Driver(DRIVER, env(tmp, dropin))
            r = compile_in(first, mode, tmp, "other.cu", [spelling])
            check(r.ok(), "%s: a compile with -restrict" % path)
            r = compile_in(first, mode, tmp, "k.cu", [])
            check(r.ok() and not r.hit, "%s: the kernel after it compiles" % path)
            if dropin:
                # Invisible: what NVIDIA's NVRTC gives in a process in this state.
                check(r.ptx == after.ptx, "drop-in: the same bytes as NVRTC after -restrict")
            r = compile_in(first, mode, tmp, "k.cu", [])
            if dropin:
                check(r.ptx == after.ptx, "drop-in: asked again, the same bytes as NVRTC")
            first.close()
            second = Driver(DRIVER, env(tmp, dropin))
            r = compile_in(second, mode, tmp, "k.cu", [])
            check(r.ok() and r.ptx == clean.ptx,
                  "%s: another process gets NVRTC's kernel for its own options%s" % (
                      path, " (it got a kernel compiled with -restrict kept, from the cache)"
                      if r.ptx == after.ptx and after.ptx != clean.ptx else ""))
            r = compile_in(second, mode, tmp, "k.cu", ["-restrict"])
            check(r.ok() and r.ptx == given.ptx, "%s: -restrict given: NVRTC's kernel" % path)
            second.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d failed" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

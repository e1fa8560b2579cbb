#!/usr/bin/env python3
"""`pip install .` from the repository, as a user does it, and what it gives.

usage: test_install.py SOURCE_ROOT WORK_DIR PYTHON

In a fresh venv (WORK_DIR/venv, made by PYTHON): `pip install SOURCE_ROOT`
(meson-python from the package index), then, from another directory: the
`kcache` command on the venv's PATH, `import kcache`, a compile miss then hit
with the installed command, `kcache run --print-shim` naming the drop-in
inside the venv, and `kcache run` serving a program's NVRTC compile from the
cache the second time. Skips (77) when the package index cannot be reached.
"""
import json
import os
import shutil
import subprocess
import sys

TOOLKIT = os.environ.get("CUDA_HOME", "/usr/local/cuda")

# A user's program calling NVRTC by its soname, as cuda-python and CuPy do; under
# `kcache run` the loader hands it the drop-in.
NVRTC_PROGRAM = r'''
import ctypes, sys
nvrtc = ctypes.CDLL("libnvrtc.so.13")
src = b'extern "C" __global__ void k(float *x) { x[threadIdx.x] *= 3.0f; }'
prog = ctypes.c_void_p()
assert nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src, b"k.cu", 0, None, None) == 0
opts = (ctypes.c_char_p * 1)(b"-arch=sm_90")
rc = nvrtc.nvrtcCompileProgram(prog, 1, opts)
size = ctypes.c_size_t()
assert rc == 0 and nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(size)) == 0 and size.value > 0
print(size.value)
'''


def run(cmd, **kw):
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("timeout", 900)
    return subprocess.run([str(c) for c in cmd], **kw)


def fail(what, p=None):
    print("FAIL " + what)
    if p is not None:
        print(p.stdout[-3000:], p.stderr[-3000:])
    return 1


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    src, work, python = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    venv = os.path.join(work, "venv")
    p = run([python, "-m", "venv", venv])
    if p.returncode:
        print("skip: cannot make a venv (apt-get install python3-venv): " + p.stderr[-300:])
        return 77
    vbin = os.path.join(venv, "bin")
    probe = run([os.path.join(vbin, "pip"), "download", "-q", "--no-deps", "--timeout", "15",
                 "-d", os.path.join(work, "probe"), "meson-python"])
    if probe.returncode:
        print("skip: the package index cannot be reached: " + probe.stderr.strip()[-300:])
        return 77
    p = run([os.path.join(vbin, "pip"), "install", "-q", src], cwd=work)
    if p.returncode:
        return fail("pip install . failed", p)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KCACHE_", "LD_PRELOAD", "ASAN_", "UBSAN_", "PYTHON"))}
    env["KCACHE_DIR"] = os.path.join(work, "cache dir")
    env["PATH"] = vbin + os.pathsep + env.get("PATH", "")
    elsewhere = os.path.join(work, "elsewhere")
    os.makedirs(elsewhere)
    failures = 0

    p = run(["kcache", "version"], env=env, cwd=elsewhere)
    if p.returncode or not p.stdout.startswith("kcache "):
        failures += fail("kcache version from the venv's PATH", p)
    elif shutil.which("kcache", path=env["PATH"]) != os.path.join(vbin, "kcache"):
        failures += fail("the kcache found first is not the venv's")
    p = run([os.path.join(vbin, "python"), "-c",
             "import kcache, sys; c = kcache.Cache(sys.argv[1]); c.put('ns', b'k', b'v');"
             "assert c.get('ns', b'k') == b'v'; print(kcache.__file__)",
             os.path.join(work, "py cache")], env=env, cwd=elsewhere)
    if p.returncode or not p.stdout.strip().startswith(venv):
        failures += fail("import kcache from the venv", p)
    p = run(["kcache", "run", "--print-shim"], env=env, cwd=elsewhere)
    shim = p.stdout.strip()
    if p.returncode or not shim.startswith(os.path.realpath(venv)) or not os.path.isfile(shim):
        failures += fail("kcache run --print-shim: %r is not the venv's drop-in" % shim, p)

    if not os.path.exists(os.path.join(TOOLKIT, "include", "cuda.h")):
        print("no CUDA toolkit at %s: compiles not tried" % TOOLKIT)
        return 1 if failures else 0
    saxpy = os.path.join(src, "examples", "saxpy.cu")
    outcomes = []
    for _ in range(2):
        p = run(["kcache", "compile", saxpy, "--arch", "sm_90", "--json"], env=env, cwd=elsewhere)
        if p.returncode:
            failures += fail("kcache compile from the venv", p)
            break
        outcomes.append(json.loads(p.stdout)["items"][0]["outcome"])
    if outcomes and outcomes != ["miss", "hit"]:
        failures += fail("installed kcache compile twice: %r, wanted miss then hit" % outcomes)

    prog = os.path.join(work, "nvrtc_program.py")
    with open(prog, "w") as f:
        f.write(NVRTC_PROGRAM)
    sizes = []
    for _ in range(2):
        p = run(["kcache", "run", "--", os.path.join(vbin, "python"), prog], env=env, cwd=elsewhere)
        if p.returncode:
            failures += fail("kcache run -- python (NVRTC by soname)", p)
            break
        sizes.append(p.stdout.strip())
    p = run(["kcache", "stats", "--json"], env=env, cwd=elsewhere)
    hits = json.loads(p.stdout).get("hits", 0) if p.returncode == 0 else 0
    # saxpy's hit above, then the program's second compile.
    if len(sizes) == 2 and (sizes[0] != sizes[1] or hits < 2):
        failures += fail("kcache run from the install: sizes %r, %d hits" % (sizes, hits))
    print("ok: pip install . gives kcache %s, the module, the drop-in at %s; run: %r, hits %d"
          % (outcomes, shim, sizes, hits))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

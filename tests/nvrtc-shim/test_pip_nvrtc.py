#!/usr/bin/env python3
"""A program that brings its own NVRTC gets that NVRTC under `kcache run`,
with that library's own libnvrtc-builtins, not the system toolkit's.

pip's nvidia-cuda-nvrtc (another build than the toolkit kcache was built
against) in a virtual environment, reached three ways:
  python   cuda.bindings.nvrtc, which loads NVRTC with cuda.pathfinder: it asks
           whether libnvrtc.so.13 is loaded (RTLD_NOLOAD), then dlopen()s
           pip's by full path;
  linked   a C program linked with NVRTC, its RUNPATH naming pip's folder;
  dlopen   a C program that does what cuda.pathfinder does (nvrtc_pip.c).
Each runs without kcache, then twice under `kcache run -v` (a miss, then a
hit in a second process): nvrtcVersion and the PTX must be the same bytes,
the NVRTC that `-v` names must be pip's, and every NVRTC file the process
maps must be pip's (its libnvrtc and its builtins; none on a hit).

The virtual environment is $PIP_VENV; it is created here if it is missing
(.ci/run creates it up front). Skips (77) when pip cannot install the
packages, or when pip's NVRTC is the toolkit's own build.

test_pip_nvrtc.py NVRTC_PIP_LINKED NVRTC_PIP_DLOPEN   the test
test_pip_nvrtc.py --calls OUT                       cuda.bindings' answers (inside the venv)
"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile

from nvrtc_copies import build_id  # beside this script
from shim_report import read_report

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pyhelp"))
import kctest  # noqa: E402

KERNEL = (b'extern "C" __global__ void axpy(float a, const float *x, float *y)\n'
          b"{\n    y[threadIdx.x] += a * x[threadIdx.x];\n}\n")
PACKAGES = ["cuda-bindings>=13,<14", "nvidia-cuda-nvrtc>=13.1,<14"]


def nvrtc_maps(out):
    """The NVRTC files this process maps, to OUT.maps."""
    with open("/proc/self/maps") as m, open(out + ".maps", "w") as o:
        for line in m:
            path = line[line.find("/"):] if "/" in line else ""
            if "/libnvrtc" in path:
                o.write(path)


def calls(out):
    from cuda.bindings import nvrtc
    from cuda.pathfinder import load_nvidia_dynamic_lib
    err, major, minor = nvrtc.nvrtcVersion()
    rec = [b"version rc %d %d.%d\n" % (int(err), major, minor)]
    err, p = nvrtc.nvrtcCreateProgram(KERNEL, b"axpy.cu", 0, [], [])
    rc = int(nvrtc.nvrtcCompileProgram(p, 1, [b"-arch=compute_90"])[0])
    rec.append(b"compile rc %d\n" % rc)
    if rc == 0:
        err, n = nvrtc.nvrtcGetPTXSize(p)
        buf = b" " * n
        nvrtc.nvrtcGetPTX(p, buf)
        rec.append(buf)
    nvrtc.nvrtcDestroyProgram(p)
    # What cuda.pathfinder says it loaded: pip's file, found in site-packages.
    loaded = load_nvidia_dynamic_lib("nvrtc")
    rec.append(b"\npathfinder %s %s\n" % (os.fsencode(loaded.abs_path),
                                         str(loaded.found_via).encode()))
    with open(out, "wb") as f:
        f.write(b"".join(rec))
    nvrtc_maps(out)
    return 0


# ---- the test --------------------------------------------------------------

check = kctest.Tally()  # every check printed; the run goes on after a failure


def venv_python():
    return kctest.venv_python(os.environ["PIP_VENV"], PACKAGES,
                              ["cuda.bindings.nvrtc", "nvidia.cu13"])


def report_of(stderr, tmp):
    """The drop-in's lines that `kcache run -v` printed, as read_report() reads them."""
    path = os.path.join(tmp, "report")
    with open(path, "w") as f:
        for line in stderr.splitlines():
            if line.startswith("kcache: nvrtc pid "):
                f.write(line[len("kcache: nvrtc "):] + "\n")
    return read_report(path)


def mapped(out, shim):
    """(libnvrtc files, libnvrtc-builtins files) the run mapped, kcache's drop-in left out."""
    with open(out + ".maps") as f:
        files = {os.path.realpath(line.strip()) for line in f if line.strip()}
    files.discard(shim)
    return (sorted(p for p in files if "/libnvrtc-builtins" not in p),
            sorted(p for p in files if "/libnvrtc-builtins" in p))


def one_way(kind, argv, env, kcache, shim, pip_lib, tmp):
    """The program (argv(OUT)) without kcache, then a miss and a hit under `kcache run -v`."""
    pip_dir = os.path.dirname(pip_lib)
    e = dict(env, KCACHE_DIR=os.path.join(tmp, "cache-" + kind))
    outs = {}
    for run in ("plain", "miss", "hit"):
        out = os.path.join(tmp, "%s-%s.out" % (kind, run))
        wrap = [] if run == "plain" else [kcache, "run", "-v", "--"]
        p = subprocess.run(wrap + argv(out), env=e, capture_output=True, text=True,
                           timeout=300)
        if p.returncode != 0:
            print(p.stdout, p.stderr)
        check(p.returncode == 0, "%s, %s: exits 0" % (kind, run))
        if p.returncode != 0:
            return
        outs[run] = kctest.read_bytes(out)
        libs, builtins = mapped(out, shim)
        if run == "hit":
            check(libs == [], "%s, hit: no NVIDIA NVRTC mapped (%s)" % (kind, libs))
        else:
            check(libs == [pip_lib], "%s, %s: the NVRTC mapped is pip's (%s)" % (kind, run, libs))
            check(builtins and all(os.path.dirname(b) == pip_dir for b in builtins),
                  "%s, %s: its builtins are pip's (%s)" % (kind, run, builtins))
        if run == "plain":
            print("%s: %s" % (kind, outs[run].split(b"\n")[0].decode()))
            check(b"compile rc 0\n" in outs[run],
                  "%s: NVRTC compiles the kernel without kcache" % kind)
            continue
        check(outs[run] == outs["plain"],
              "%s, %s: nvrtcVersion and the PTX are the bytes the program gets without "
              "kcache" % (kind, run))
        r = report_of(p.stderr, tmp)
        want = (0, 1, "yes") if run == "miss" else (1, 0, "no")
        got = [(x.get("hits"), x.get("misses"), x.get("nvrtc-loaded")) for x in r]
        check(got == [want], "%s, %s: hits, misses, NVIDIA's NVRTC loaded: %s (report %s)" % (
            kind, run, want, r))
        check(len(r) == 1 and r[0].get("nvrtc-path") == pip_lib,
              "%s, %s: `kcache run -v` names pip's NVRTC as the one it forwarded to (%s)" % (
                  kind, run, [x.get("nvrtc-path") for x in r]))


def main():
    linked, dlopen = (os.path.abspath(a) for a in sys.argv[1:3])
    kcache = os.environ["KCACHE_EXE"]
    system = os.environ["NVRTC_REAL"]
    py = venv_python()
    found = glob.glob(os.path.join(os.environ["PIP_VENV"], "lib", "python3*", "site-packages",
                                   "nvidia", "cu13", "lib", "libnvrtc.so.13"))
    if not found:
        print("SKIP: the virtual environment has no nvidia/cu13/lib/libnvrtc.so.13")
        return 77
    pip_lib = os.path.realpath(found[0])
    if build_id(pip_lib) == build_id(system):
        print("SKIP: pip's NVRTC is the toolkit's own build: nothing tells them apart")
        return 77
    shim = os.path.realpath(subprocess.run([kcache, "run", "--print-shim"], capture_output=True,
                                           text=True, check=True).stdout.strip())
    with tempfile.TemporaryDirectory(prefix="kcache-pip-nvrtc-") as tmp:
        # No NVRTC on LD_LIBRARY_PATH: each program finds its own.
        env = kctest.dropin_env(tmp, lambda d: os.path.exists(os.path.join(d, "libnvrtc.so.13")))
        # A drop-in built with ASan comes with its runtime, loaded after the C library:
        # not preloaded, whose dlopen would search its own RUNPATH for NVRTC's builtins.
        py_env = dict(env, ASAN_OPTIONS=env["ASAN_OPTIONS"] + ":detect_leaks=0")
        one_way("python", lambda out: [py, os.path.abspath(__file__), "--calls", out], py_env,
                kcache, shim, pip_lib, tmp)
        # Linked with NVRTC; RUNPATH $ORIGIN/nvlib, here pip's folder.
        bindir = os.path.join(tmp, "bin")
        os.makedirs(bindir)
        os.symlink(os.path.dirname(pip_lib), os.path.join(bindir, "nvlib"))
        exe = os.path.join(bindir, os.path.basename(linked))
        shutil.copy2(linked, exe)
        one_way("linked", lambda out: [exe, out], env, kcache, shim, pip_lib, tmp)
        one_way("dlopen", lambda out: [dlopen, out, pip_lib], env, kcache, shim, pip_lib, tmp)
    return check.status()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--calls":
        sys.exit(calls(sys.argv[2]))
    sys.exit(main())

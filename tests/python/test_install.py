#!/usr/bin/env python3
"""`pip install '.[cuda]'` from the repository, as the README says, and what it gives.

usage: test_install.py SOURCE_ROOT WORK_DIR PYTHON

Always, from pyproject.toml: the `cuda` extra names cuda-core and
cuda-bindings pinned as the python suite installs them (run_pytest.py's
PACKAGES: the versions kcache's tests import together; cuda-bindings within
the major of the NVRTC kcache is built for), and the `test` extra the same
with pytest. `pip install cuda-core` alone leaves out cuda.bindings
(`cannot import name 'bindings'`), and unpinned names let pip pair a
cuda-core with a cuda-bindings of another CUDA major.

Then, in a fresh venv (WORK_DIR/venv, made by PYTHON): `pip install
'SOURCE_ROOT[cuda]'` (meson-python from the package index), the installed
metadata's `cuda` extra, and, from another directory: `import cuda.core`
and `from cuda import bindings` beside `kcache.ProgramCache`, the `kcache`
command on the venv's PATH, `import kcache`, a compile miss then hit with
the installed command, `kcache run --print-shim` naming the drop-in inside
the venv, and `kcache run` serving a program's NVRTC compile from the cache
the second time. That part skips (77) when the package index cannot be
reached, after the pyproject check has run.
"""
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_pytest import PACKAGES  # noqa: E402

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


# What `.[cuda]` must give: cuda.core importing with its bindings, so that
# kcache.ProgramCache is cuda.core's ProgramCacheResource; and the extra in the
# installed metadata.
CUDA_EXTRA_PROGRAM = r'''
import importlib.metadata, re, sys
import cuda.core
from cuda import bindings
from cuda.core.utils import ProgramCacheResource
import kcache
assert issubclass(kcache.ProgramCache, ProgramCacheResource), kcache.ProgramCache.__mro__
kcache.ProgramCache(sys.argv[1])[b"k"] = b"v"
extra = sorted(r for r in importlib.metadata.requires("kcache-cuda") or () if 'extra == "cuda"' in r)
assert [re.split(r"[<>=!~;\[ ]", r)[0] for r in extra] == ["cuda-bindings", "cuda-core"], extra
print("cuda-core %s, cuda-bindings %s; kcache-cuda's cuda extra: %s"
      % (importlib.metadata.version("cuda-core"), importlib.metadata.version("cuda-bindings"), extra))
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


def pyproject_extras(src):
    """[project.optional-dependencies] of SOURCE_ROOT/pyproject.toml: {extra: [requirement]}."""
    path = os.path.join(src, "pyproject.toml")
    try:
        import tomllib
    except ImportError:  # Python 3.10: the table's lines read as the file writes them
        with open(path) as f:
            m = re.search(r"^\[project\.optional-dependencies\]\n(.*?)(?=^\[|\Z)", f.read(),
                          re.M | re.S)
        return {k: re.findall(r'"([^"]+)"', v)
                for k, v in re.findall(r"^(\w+)\s*=\s*\[(.*?)\]", m.group(1) if m else "",
                                       re.M | re.S)}
    with open(path, "rb") as f:
        return tomllib.load(f).get("project", {}).get("optional-dependencies", {})


def req_name(req):
    return re.match(r"[A-Za-z0-9._-]+", req).group(0).lower().replace("_", "-")


def check_extras(src):
    """The failures of pyproject.toml's cuda and test extras (see the docstring)."""
    extras = pyproject_extras(src)
    tested = {req_name(r): r.replace(" ", "") for r in PACKAGES if req_name(r) != "pytest"}
    failures = []
    for extra, also in (("cuda", set()), ("test", {"pytest"})):
        have = {req_name(r): r.replace(" ", "") for r in extras.get(extra, [])}
        if set(have) != set(tested) | also:
            failures.append("the %s extra names %s, not %s" % (extra, sorted(have),
                                                                sorted(set(tested) | also)))
            continue
        for name, req in tested.items():
            if have[name] != req:
                failures.append("the %s extra asks for %s; the python suite tests %s"
                                % (extra, have[name], req))
    bindings = tested.get("cuda-bindings", "")
    m = re.fullmatch(r"cuda-bindings>=(\d+)(?:\.\d+)*,<(\d+)", bindings)
    if not m or int(m.group(2)) != int(m.group(1)) + 1:
        failures.append("cuda-bindings is not held to one CUDA major: %r" % bindings)
    return failures


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    src, work, python = sys.argv[1:4]
    bad = check_extras(src)
    for what in bad:
        fail("pyproject.toml: " + what)
    if not bad:
        print("ok: pyproject.toml's cuda extra: %s" % ", ".join(pyproject_extras(src)["cuda"]))
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    venv = os.path.join(work, "venv")
    p = run([python, "-m", "venv", venv])
    if p.returncode:
        print("skip: cannot make a venv (apt-get install python3-venv): " + p.stderr[-300:])
        return 1 if bad else 77
    vbin = os.path.join(venv, "bin")
    probe = run([os.path.join(vbin, "pip"), "download", "-q", "--no-deps", "--timeout", "15",
                 "-d", os.path.join(work, "probe"), "meson-python"])
    if probe.returncode:
        print("skip: the package index cannot be reached: " + probe.stderr.strip()[-300:])
        return 1 if bad else 77
    p = run([os.path.join(vbin, "pip"), "install", "-q", src + "[cuda]"], cwd=work)
    if p.returncode:
        return fail("pip install '.[cuda]' failed", p)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KCACHE_", "LD_PRELOAD", "ASAN_", "UBSAN_", "PYTHON"))}
    env["KCACHE_DIR"] = os.path.join(work, "cache dir")
    env["PATH"] = vbin + os.pathsep + env.get("PATH", "")
    elsewhere = os.path.join(work, "elsewhere")
    os.makedirs(elsewhere)
    failures = len(bad)

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
    p = run([os.path.join(vbin, "python"), "-c", CUDA_EXTRA_PROGRAM,
             os.path.join(work, "program cache")], env=env, cwd=elsewhere)
    if p.returncode or "cuda-core" not in p.stdout:
        failures += fail("cuda.core from '.[cuda]' beside kcache.ProgramCache", p)
    else:
        print("ok: " + p.stdout.strip())
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
    print("ok: pip install '.[cuda]' gives kcache %s, the module, the drop-in at %s; run: %r, hits %d"
          % (outcomes, shim, sizes, hits))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

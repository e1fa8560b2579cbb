#!/usr/bin/env python3
"""Runs the kcache Python tests (tests/python/) with pytest, as a meson test.

usage: run_pytest.py PYTHON BUILD_PYTHON_DIR KCACHE KCACHE_FILL VENV [PYTEST-ARGS...]

PYTHON is the interpreter the module was built for. The tests need pytest,
cuda-core and cuda-bindings from the package index: they go into VENV (in the
build directory, made once and kept; a marker file says it is complete). When
the index cannot be reached the venv cannot be made, and the tests are
skipped (exit 77) saying so; a venv made before is used as it is.

The module is the build's own (BUILD_PYTHON_DIR/kcache, on PYTHONPATH), not an
installed one, so that the tests run what this build compiled, sanitizers
included: a module built with AddressSanitizer needs its runtime loaded first,
which is done here when the module links it.
"""
import os
import subprocess
import sys

# pyproject.toml's cuda and test extras ask for the same (test_install.py checks).
PACKAGES = ["pytest", "cuda-core>=1.2", "cuda-bindings>=13,<14"]


def make_venv(python, venv):
    marker = os.path.join(venv, "kcache-test-venv-complete")
    vpy = os.path.join(venv, "bin", "python")
    if os.path.exists(marker):
        return vpy, None
    p = subprocess.run([python, "-m", "venv", "--clear", venv], capture_output=True, text=True)
    if p.returncode:
        return None, "cannot make a venv with %s (apt-get install python3-venv): %s" % (
            python, p.stderr.strip()[-300:])
    p = subprocess.run([vpy, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "--timeout", "20"] + PACKAGES, capture_output=True, text=True,
                       timeout=900)
    if p.returncode:
        return None, "pip could not install %s (no package index?): %s" % (
            " ".join(PACKAGES), p.stderr.strip()[-300:])
    with open(marker, "w") as f:
        f.write(" ".join(PACKAGES) + "\n")
    return vpy, None


def asan_runtime(module_dir):
    """The AddressSanitizer runtime the built module links, or None."""
    for name in os.listdir(module_dir):
        if name.startswith("_kcache") and name.endswith(".so"):
            p = subprocess.run(["ldd", os.path.join(module_dir, name)], capture_output=True,
                               text=True)
            for word in p.stdout.split():
                if "libasan" in word and word.startswith("/"):
                    return word
    return None


def preload_asan(env, module_dir):
    """Where the module links AddressSanitizer, env loads its runtime first.

    Python itself is not built with the sanitizer: its runtime goes first, and
    the interpreter's own allocations are not ours to report as leaks."""
    asan = asan_runtime(module_dir)
    if asan:
        env["LD_PRELOAD"] = asan
        env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") +
                               ":verify_asan_link_order=0:detect_leaks=0")


def main():
    if len(sys.argv) < 6:
        print(__doc__)
        return 2
    python, build_py, kcache, fill, venv = sys.argv[1:6]
    module_dir = os.path.join(build_py, "kcache")
    if not os.path.isdir(module_dir):
        print("skip: the kcache module was not built (no Python headers: apt-get install python3-dev)")
        return 77
    vpy, why = make_venv(python, venv)
    if not vpy:
        print("skip: " + why)
        return 77
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ)
    env.update({
        "PYTHONPATH": build_py,
        "KCACHE_EXE": os.path.abspath(kcache),
        "KCACHE_FILL": os.path.abspath(fill),
        "KCACHE_SOURCE_ROOT": os.path.dirname(os.path.dirname(here)),
        "PYTHONDONTWRITEBYTECODE": "1",
    })
    preload_asan(env, module_dir)
    cmd = [vpy, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", here] + sys.argv[6:]
    p = subprocess.run(cmd, env=env, cwd=here)
    if p.returncode == 5:  # no tests collected
        return 77
    return 0 if p.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

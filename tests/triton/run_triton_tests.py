#!/usr/bin/env python3
"""Runs the tests of kcache.triton with the real Triton (tests/triton/), as a meson test.

usage: run_triton_tests.py PYTHON BUILD_PYTHON_DIR KCACHE SOURCE_ROOT [PYTEST-ARGS...]

Triton is about 1.1 GB from the package index, too much for every CI run on
two cores, so these tests do not install it: they use the first interpreter
of these that imports both triton and pytest, and are skipped (exit 77),
saying so, when none does:

  $KCACHE_TEST_TRITON_PYTHON
  SOURCE_ROOT/.venv-triton/bin/python  (python3 -m venv .venv-triton &&
                                        .venv-triton/bin/pip install triton pytest)
  PYTHON, the interpreter the module was built for

Compiling for sm_80/sm_90 needs no GPU. The module is the build's own
(BUILD_PYTHON_DIR on PYTHONPATH); one built with AddressSanitizer gets its
runtime preloaded, as tests/python/run_pytest.py does.
"""
import os
import subprocess
import sys


def candidates(python, root):
    out = []
    env = os.environ.get("KCACHE_TEST_TRITON_PYTHON")
    if env:
        out.append(env)
    out.append(os.path.join(root, ".venv-triton", "bin", "python"))
    out.append(python)
    return out


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from run_pytest import preload_asan  # noqa: E402  (one way to load the module's ASan runtime)

def usable(py):
    if not os.path.exists(py):
        return False
    p = subprocess.run([py, "-c", "import triton, pytest"], capture_output=True, text=True,
                       timeout=120)
    return p.returncode == 0


def main():
    if len(sys.argv) < 5:
        print(__doc__)
        return 2
    python, build_py, kcache, root = sys.argv[1:5]
    module_dir = os.path.join(build_py, "kcache")
    if not os.path.isdir(module_dir):
        print("skip: the kcache module was not built (no Python headers: apt-get install python3-dev)")
        return 77
    tried = candidates(python, root)
    py = next((p for p in tried if usable(p)), None)
    if py is None:
        print("skip: no interpreter here imports triton and pytest (tried %s); to run these "
              "tests: python3 -m venv .venv-triton && .venv-triton/bin/pip install triton pytest, "
              "or set KCACHE_TEST_TRITON_PYTHON" % ", ".join(tried))
        return 77
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ)
    env.update({
        "PYTHONPATH": os.path.abspath(build_py),
        "KCACHE_EXE": os.path.abspath(kcache),
        "PYTHONDONTWRITEBYTECODE": "1",
    })
    preload_asan(env, module_dir)
    print("triton tests with %s" % py, flush=True)
    cmd = [py, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", here] + sys.argv[5:]
    p = subprocess.run(cmd, env=env, cwd=here)
    if p.returncode == 5:
        return 77
    return 0 if p.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

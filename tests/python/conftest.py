"""Fixtures for the kcache Python tests (run by run_pytest.py, which sets the environment).

KCACHE_EXE is the kcache command of this build, KCACHE_FILL its test helper,
KCACHE_SOURCE_ROOT the repository; each test gets a cache directory of its own
and an environment with no KCACHE_* of the caller's.
"""
import os
import subprocess

import pytest

KCACHE = os.environ.get("KCACHE_EXE", "kcache")
FILL = os.environ.get("KCACHE_FILL", "")
SOURCE_ROOT = os.environ.get("KCACHE_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), "..", ".."))
TOOLKIT = os.environ.get("CUDA_HOME", "/usr/local/cuda")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    """No KCACHE_* setting of the caller's reaches a test; HOME is the test's own."""
    for k in list(os.environ):
        if k.startswith("KCACHE_") and k not in ("KCACHE_EXE", "KCACHE_FILL", "KCACHE_SOURCE_ROOT"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)


@pytest.fixture
def cache_dir(tmp_path):
    d = tmp_path / "cache with space"
    d.mkdir()
    return d


def run_cli(*args, cache_dir=None, check=True, env=None):
    """Runs this build's kcache; returns the CompletedProcess (text)."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    if cache_dir is not None:
        e["KCACHE_DIR"] = str(cache_dir)
    if env:
        e.update(env)
    p = subprocess.run([KCACHE] + [str(a) for a in args], env=e, capture_output=True, text=True,
                       timeout=300)
    if check and p.returncode != 0:
        raise AssertionError("kcache %s: exit %d\n%s%s" % (" ".join(map(str, args)), p.returncode,
                                                           p.stdout, p.stderr))
    return p


def have_toolkit():
    return os.path.exists(os.path.join(TOOLKIT, "include", "cuda.h"))


needs_toolkit = pytest.mark.skipif(not have_toolkit(), reason="no CUDA toolkit at " + TOOLKIT)


def cuda_core():
    """cuda.core's utils module, or a skip saying why it cannot be used."""
    try:
        import cuda.core.utils as utils  # noqa: F401
        import cuda.core as core
    except Exception as ex:  # not installed, or its bindings cannot load
        pytest.skip("cuda.core is not usable here: %s" % ex)
    return core

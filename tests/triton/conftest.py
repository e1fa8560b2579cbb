"""Fixtures for the tests of kcache.triton with the real Triton (run by run_triton_tests.py).

Each test gets a kcache cache directory, an empty TRITON_CACHE_DIR that must
stay empty, and a staging base of its own (KCACHE_TRITON_STAGING), so that
what a process leaves behind can be seen. The kernels are compiled in child
processes (tt_compile.py), as a user's programs would: a fresh process is
the case that matters, and the staging directory's removal at exit is part
of what is checked.
"""
import json
import os
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
KCACHE = os.environ.get("KCACHE_EXE", "kcache")
COMPILE = os.path.join(HERE, "tt_compile.py")


class Env:
    def __init__(self, tmp_path):
        self.root = tmp_path
        self.cache = tmp_path / "kcache dir"
        self.triton_dir = tmp_path / "triton cache"
        self.stage = tmp_path / "stage base"
        self.home = tmp_path / "home"
        for d in (self.cache, self.triton_dir, self.stage, self.home):
            d.mkdir()
        self.vars = {k: v for k, v in os.environ.items()
                     if not k.startswith(("KCACHE_", "TRITON_")) or k == "KCACHE_EXE"}
        self.vars.update({
            "HOME": str(self.home),
            "KCACHE_DIR": str(self.cache),
            "KCACHE_TRITON_STAGING": str(self.stage),
            "TRITON_CACHE_DIR": str(self.triton_dir),
            "TRITON_CACHE_MANAGER": "kcache.triton:CacheManager",
            "TRITON_DEFAULT_FP_FUSION": "1",
        })

    def popen(self, *args, env=None):
        e = dict(self.vars)
        e.update(env or {})
        e = {k: v for k, v in e.items() if v is not None}
        return subprocess.Popen([sys.executable, COMPILE] + [str(a) for a in args], env=e,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def compile(self, *args, env=None):
        p = self.popen(*args, env=env)
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, "tt_compile %s: exit %d\n%s" % (args, p.returncode, err[-3000:])
        return json.loads(out), err

    def kcache(self, *args):
        e = dict(self.vars)
        p = subprocess.run([KCACHE] + [str(a) for a in args], env=e, capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0, "kcache %s: %s" % (args, p.stderr)
        return p.stdout

    def triton_files(self):
        return [os.path.join(d, f) for d, _, fs in os.walk(self.triton_dir) for f in fs]

    def staged(self):
        return sorted(os.listdir(self.stage))


@pytest.fixture
def env(tmp_path):
    return Env(tmp_path)


def wait_until(seconds):
    return "%.3f" % (time.time() + seconds)

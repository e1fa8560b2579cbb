#!/usr/bin/env python3
"""A cache that fails warns once and never fails the job (issue 38, jax#12582).

Usage: test_cache_failure.py KCACHE KCACHE_FILL [TEST-NAME...]

For each tier there is (the local store, the Redis tier), a failure of it:
a cache directory that cannot be made, a Redis nobody answers at. Through
the command (kcache compile) and the drop-in NVRTC (nvrtc-user under kcache
run, $NVRTC_USER), each compile must succeed with its kernel and say why
the cache was not used in one warning on stderr. Python's side is
tests/python/test_cache.py (test_*_warns_and_compiles). Skips without NVRTC.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_cli as base  # noqa: E402  (the same harness, same arguments)
from kctest import Cache, Skip, check  # noqa: E402  (on the path test_cli set)

SRC = "__global__ void k(int *x) { x[0] = 42; }\n"
ASAN = {"ASAN_OPTIONS": "detect_leaks=0:verify_asan_link_order=0"}


def source(root):
    path = os.path.join(root, "k.cu")
    with open(path, "w") as f:
        f.write(SRC)
    p = subprocess.run([base.KCACHE, "compile", path, "--arch", "sm_90", "--no-cache"],
                       capture_output=True, text=True)
    if p.returncode:
        raise Skip("no NVRTC here: %s" % p.stderr.strip()[-200:])
    return path


def failures(root):
    """(what, environment) for each tier's failure."""
    blocker = os.path.join(root, "a file")
    open(blocker, "w").close()
    return [("the local store", {"KCACHE_DIR": os.path.join(blocker, "cache")}),
            ("the Redis tier", {"KCACHE_REMOTE": "redis://127.0.0.1:1"})]


def warnings_of(err):
    return [l for l in err.splitlines() if l.startswith("kcache: warning:")]


def test_cli(root):
    path = source(root)
    for what, env in failures(root):
        c = Cache(root, "cli-" + what.split()[-2])
        for run in range(2):
            out, err = c.run("compile", path, "--arch", "sm_90", "-o",
                             os.path.join(root, "k%d.cubin" % run), env=env)
            check(os.path.getsize(os.path.join(root, "k%d.cubin" % run)) > 0,
                  "%s: the kernel is made: %r" % (what, out))
            check(len(warnings_of(err)) <= 1, "%s: at most one warning a run: %r" % (what, err))
            if run == 0:
                check(len(warnings_of(err)) == 1, "%s: one warning: %r" % (what, err))


def test_dropin(root):
    user = os.environ.get("NVRTC_USER")
    if not user:
        raise Skip("no nvrtc-user ($NVRTC_USER)")
    path = source(root)
    for what, env in failures(root):
        c = Cache(root, "dropin-" + what.split()[-2])
        out, err = c.run("run", user, path, "sm_90", env=dict(env, **ASAN))
        check(out.startswith("0 ") and int(out.split()[1]) > 0,
              "%s: the program's compile succeeds: %r %r" % (what, out, err))
        w = warnings_of(err)
        check(len(w) == 1, "%s: one warning on the program's stderr: %r" % (what, err))
        check(("a file" in w[0]) if "local" in what else ("127.0.0.1:1" in w[0]), w)
    # A cache that is off is the user's choice: nothing to warn about.
    c = Cache(root, "off")
    out, err = c.run("run", user, path, "sm_90", env=dict(ASAN, KCACHE_DISABLE="1"))
    check(out.startswith("0 ") and not warnings_of(err), "off: silent: %r" % err)


def main():
    return base.run_tests(globals())


if __name__ == "__main__":
    sys.exit(main())

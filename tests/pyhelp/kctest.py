"""What kcache's Python tests share: check() and Failure, Skip, a Tally of
checks that go on after a failure, a cache directory of a test's own with
ways to run kcache on it, and the runner that gives each test a scratch
directory.

A script names its executables once, setup(KCACHE[, KCACHE_FILL]), then uses
the rest. Exit statuses are meson's: 0 passed, 1 failed, 77 skipped.
"""
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback

KCACHE = None  # the kcache executable (setup)
FILL = None  # kcache-fill, for scripts that fill caches without a compiler (setup)


def venv_python(venv, packages, modules):
    """The python of the virtual environment venv, made and given packages (pip)
    unless it imports modules already; exits 77, saying why, where no virtual
    environment can be made or pip cannot install them (no network)."""
    py = os.path.join(venv, "bin", "python")
    probe = [py, "-c", "import " + ", ".join(modules)]
    if os.path.exists(py) and subprocess.run(probe, capture_output=True).returncode == 0:
        return py
    shutil.rmtree(venv, ignore_errors=True)
    made = subprocess.run([sys.executable, "-m", "venv", venv], capture_output=True, text=True)
    if made.returncode != 0:
        print("SKIP: cannot create a virtual environment (python3-venv):", made.stderr.strip())
        sys.exit(77)
    pip = subprocess.run([py, "-m", "pip", "install", "-q"] + packages,
                         capture_output=True, text=True)
    if pip.returncode != 0 or subprocess.run(probe, capture_output=True).returncode != 0:
        print("SKIP: pip cannot install %s (no network?): %s" % (
            " ".join(packages), (pip.stderr.strip().splitlines() or [""])[-1]))
        sys.exit(77)
    return py


class Failure(Exception):
    """A check that did not hold: the test fails with this message."""


class Skip(Exception):
    """What the test needs is not here (a server, a toolkit): it is skipped, saying why."""


def check(cond, what):
    if not cond:
        raise Failure(what)


class Tally:
    """Checks that go on after a failure: each printed ok or FAIL, the failures kept."""

    def __init__(self):
        self.failures = []

    def __call__(self, ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            self.failures.append(what)

    def status(self):
        """The exit status: 1 with the count of failed checks printed, else 0."""
        if self.failures:
            print("%d check(s) failed" % len(self.failures))
            return 1
        return 0


def run_logged(argv, env, cwd):
    """Runs argv and returns its exit status; prints the command and its output
    when it fails or writes to stderr, which is what a failed check needs."""
    p = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    if p.returncode != 0 or p.stderr.strip():
        print(" ".join(argv), "->", p.returncode, p.stdout, p.stderr)
    return p.returncode


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def drop_lib_dirs(env, unwanted):
    """Leaves out of env's LD_LIBRARY_PATH its empty entries and every folder d
    for which unwanted(d) holds; returns env. meson puts the folder of each
    library it built there, the drop-in NVRTC's among them: a program that is
    to find NVIDIA's NVRTC (through its RUNPATH or the loader's cache) must
    not find the drop-in, or another NVRTC, there first."""
    env["LD_LIBRARY_PATH"] = ":".join(d for d in env.get("LD_LIBRARY_PATH", "").split(":")
                                      if d and not unwanted(d))
    return env


def dropin_env(tmp, unwanted, unset=()):
    """The environment of a program run with or without the drop-in NVRTC: a
    cache of its own in tmp; none of the caller's kcache settings or preloads,
    nor the variables in unset; LD_LIBRARY_PATH without the folders
    unwanted(d) names (drop_lib_dirs()); and ASan told that the drop-in, which
    links the runtime, is preloaded before the program's own copy of it."""
    env = dict(os.environ)
    env["KCACHE_DIR"] = os.path.join(tmp, "cache")
    for k in ("KCACHE_PATH", "KCACHE_DISABLE", "KCACHE_NVRTC_REAL", "LD_PRELOAD") + tuple(unset):
        env.pop(k, None)
    drop_lib_dirs(env, unwanted)
    env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"
    return env


def setup(kcache, fill=None):
    global KCACHE, FILL
    KCACHE = os.path.abspath(kcache)
    FILL = os.path.abspath(fill) if fill else None


class Cache:
    """A cache directory of its own under root, and ways to run kcache against it.

    env: more of the environment every run of this cache gets (a remote, say).
    """

    def __init__(self, root, name="cache", env=None):
        self.root = root
        self.dir = os.path.join(root, name)
        self.db = os.path.join(self.dir, "kcache.db")
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith("KCACHE_") and k != "XDG_CACHE_HOME"}
        self.env.update({"KCACHE_DIR": self.dir, "NO_COLOR": "1", "HOME": root})
        self.env.update(env or {})

    def run(self, *args, rc=0, stdin=None, env=None, binary=False):
        """Runs kcache ARGS; fails unless it exits rc (None: any). Returns (stdout, stderr)."""
        e = dict(self.env)
        if env:
            e.update(env)
        p = subprocess.run([KCACHE] + list(args), env=e, capture_output=True,
                           stdin=stdin if stdin is not None else subprocess.DEVNULL,
                           timeout=120)
        out = p.stdout if binary else p.stdout.decode("utf-8", "replace")
        err = p.stderr.decode("utf-8", "replace")
        if rc is not None and p.returncode != rc:
            raise Failure("kcache %s: exit %d, wanted %d\nstdout: %s\nstderr: %s"
                          % (" ".join(args), p.returncode, rc, out[:2000], err))
        return out, err

    def json(self, *args, rc=0, env=None):
        out, _ = self.run(*args, "--json", rc=rc, env=env)
        try:
            return json.loads(out)
        except ValueError as ex:
            raise Failure("kcache %s --json printed invalid JSON (%s): %r"
                          % (" ".join(args), ex, out[:500]))

    def fill(self, n, *opts):
        """Puts n synthetic entries with kcache-fill; returns their keys."""
        os.makedirs(self.dir, exist_ok=True)
        p = subprocess.run([FILL, self.db, str(n)] + [str(o) for o in opts],
                           capture_output=True, timeout=120)
        if p.returncode != 0:
            raise Failure("kcache-fill failed: %s" % p.stderr.decode())
        return p.stdout.decode().split()

    def entries(self):
        return {e["key"]: e for e in self.json("ls")["entries"]}

    def get(self, key):
        out, _ = self.run("get", key, binary=True, stdin=None)
        return out

    def snapshot(self):
        """Every entry's metadata and bytes: what a user would notice changing."""
        snap = {}
        for key, e in self.entries().items():
            meta = {k: e[k] for k in ("kind", "arch", "name", "size", "created_ms")}
            snap[key] = (meta, self.get(key))
        return snap


def run_tests(tests, only=(), prefix="kcache-test-", stop_on_skip=False):
    """Runs each test (a function of a scratch directory) and returns the exit status.

    tests: a module's globals() (its test_* functions, by name) or a list of
    functions, run in that order. only: names (with or without "test_") to run
    alone. A Skip is said and counted: with stop_on_skip the run ends there
    (what one test lacked, the next lacks too); the status is 77 when nothing
    failed and nothing passed. KCACHE_TEST_KEEP keeps the scratch directories.
    """
    if isinstance(tests, dict):
        tests = [f for n, f in sorted(tests.items()) if n.startswith("test_") and callable(f)]
    failed, passed, skipped = [], 0, 0
    for fn in tests:
        name = fn.__name__
        if only and name not in only and name[5:] not in only:
            continue
        root = tempfile.mkdtemp(prefix=prefix)
        try:
            fn(root)
            passed += 1
            print("ok   %s" % name)
        except Skip as ex:
            skipped += 1
            print("skip %s: %s" % (name, ex))
            if stop_on_skip:
                break
        except Exception as ex:  # a crash of the test is a failure too
            failed.append(name)
            print("FAIL %s: %s" % (name, ex))
            if not isinstance(ex, Failure):
                traceback.print_exc()
        finally:
            if not os.environ.get("KCACHE_TEST_KEEP"):
                shutil.rmtree(root, ignore_errors=True)
            else:
                print("     kept %s" % root)
    if failed:
        print("%d failed" % len(failed))
    else:
        print("%d passed, %d skipped" % (passed, skipped) if skipped else "all passed")
    if failed:
        return 1
    return 77 if skipped and (stop_on_skip or not passed) else 0


@contextlib.contextmanager
def redis_on_loopback(workdir):
    """A redis-server of the test's own on a free loopback port (no persistence, its files
    in workdir), stopped after: yields (url, port), or None where redis-server is not
    installed."""
    server = shutil.which("redis-server")
    if not server:
        yield None
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(workdir)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        yield "redis://127.0.0.1:%d" % port, port
    finally:
        proc.terminate()
        proc.wait(10)

#!/usr/bin/env python3
"""The drop-in NVRTC, compared call by call with NVIDIA's library.

test_shim.py linked|dlopen|dlopen-soname NVRTC_CALLS

nvrtc_calls writes every answer NVRTC gives it (return codes, sizes, every
output byte, logs, lowered names) for saxpy, name expressions, headers in
memory, headers from -I, a compile error, PTX for compute_90, LTO-IR with
-dlto, and two threads at once. It runs on NVIDIA's library, then under
`kcache run` (first process misses, second hits), by hand with LD_PRELOAD,
with KCACHE_DISABLE=1, and after a header edit; every file must be
byte-identical to NVIDIA's, and the drop-in's counts must say what happened.
"""
import filecmp
import json
import os
import shutil
import subprocess
import sys
import tempfile

from shim_report import read_report  # beside this script

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pyhelp"))
import kctest  # noqa: E402

MODE, CALLS = sys.argv[1], sys.argv[2]
KCACHE = os.environ["KCACHE_EXE"]
REAL = os.environ["NVRTC_REAL"]
INCLUDE = os.environ["SHIM_INCLUDE"]
N_CASES = 10  # cases in nvrtc_calls.c; broken.cu is the one that cannot be cached

SHIM = subprocess.run([KCACHE, "run", "--print-shim"], capture_output=True, text=True,
                      check=True).stdout.strip()


check = kctest.Tally()  # every check printed; the run goes on after a failure


def base_env(tmp):
    # meson puts the drop-in's directory on LD_LIBRARY_PATH (it is a built
    # library): NVIDIA's runs must not find it there.
    shim_dir = os.path.realpath(os.path.dirname(SHIM))
    return kctest.dropin_env(tmp, lambda d: os.path.realpath(d) == shim_dir,
                             unset=("NVRTC_CALLS_SKIP",))


def calls(out, env, include, wrap=()):
    lib = {"dlopen": [REAL], "dlopen-soname": [os.path.basename(REAL)]}.get(MODE, [])
    argv = list(wrap) + [CALLS, out, include] + lib
    p = subprocess.run(argv, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        print(p.stdout, p.stderr)
    check(p.returncode == 0, f"{' '.join(argv[:3])}... exits 0")



def stats(env):
    out = subprocess.run([KCACHE, "stats", "--json"], env=env, capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out)


def same(a, b, what):
    check(filecmp.cmp(a, b, shallow=False), what)
    check(filecmp.cmp(a + ".fork", b + ".fork", shallow=False), what + " (forked child)")


def parent(rows):
    """The calling process's line: the forked child exits (and reports) first."""
    return rows[-1] if rows else {}


def main():
    shim = SHIM
    tmp2 = tempfile.mkdtemp(prefix="kcache-shim-run-")
    env = base_env(tmp2)
    with tempfile.TemporaryDirectory(prefix="kcache-shim-") as tmp:
        env = base_env(tmp)
        rep = os.path.join(tmp, "report")
        j = lambda name: os.path.join(tmp, name)  # noqa: E731

        if MODE == "dlopen-soname":
            p = subprocess.run([CALLS, j("probe.bin"), INCLUDE, os.path.basename(REAL)], env=env,
                               capture_output=True, text=True)
            if p.returncode != 0:
                print("SKIP: the loader does not find %s by name here (ldconfig): %s"
                      % (os.path.basename(REAL), p.stderr.strip()))
                return 77
        # NVIDIA's answers; twice, to show they are deterministic at all.
        calls(j("real.bin"), dict(env, KCACHE_NVRTC_REPORT=rep), INCLUDE)
        check(not read_report(rep), "the reference run is NVIDIA's library, not the drop-in")
        calls(j("real2.bin"), env, INCLUDE)
        same(j("real.bin"), j("real2.bin"), "NVIDIA's NVRTC gives the same bytes twice")

        run_env = dict(env, KCACHE_NVRTC_REPORT=rep)
        calls(j("miss.bin"), run_env, INCLUDE, [KCACHE, "run", "--"])
        r = read_report(rep)
        same(j("real.bin"), j("miss.bin"), "first process (misses): every answer as NVIDIA's")
        check(len(r) == 2 and parent(r)["hits"] == 0 and parent(r)["misses"] == N_CASES,
              f"first process: 0 hits, {N_CASES} misses (report {r})")
        check(len(r) == 2 and r[0]["hits"] == 1 and r[0]["misses"] == 0,
              f"first process's forked child: a hit on what the parent stored (report {r})")
        st = stats(env)
        # One lookup per compile request: an sm_XX compile's PTX is an entry of its
        # own, looked up beside its CUBIN uncounted; broken.cu's failed compile
        # stored nothing: an error, not a miss.
        check(st["hits"] == 1 and st["misses"] == N_CASES - 1 and st["errors"] == 1,
              f"kcache stats after the first process: 1 hit (the child's), "
              f"{N_CASES - 1} misses, 1 error "
              f"({st['hits']}, {st['misses']}, {st['errors']})")

        calls(j("hit.bin"), run_env, INCLUDE, [KCACHE, "run", "--"])
        r = read_report(rep)
        same(j("real.bin"), j("hit.bin"), "second process (hits): every answer as NVIDIA's")
        check(parent(r).get("hits") == N_CASES - 1 and parent(r).get("misses") == 1,
              f"second process: {N_CASES - 1} hits, the compile error a miss (report {r})")
        st = stats(env)
        check(st["hits"] >= N_CASES - 1, f"kcache stats counts the hits ({st['hits']})")

        # Without the compile error, a warm process never loads NVIDIA's library.
        skip_env = dict(run_env, NVRTC_CALLS_SKIP="broken.cu")
        calls(j("real-ok.bin"), dict(env, NVRTC_CALLS_SKIP="broken.cu"), INCLUDE)
        calls(j("warm.bin"), skip_env, INCLUDE, [KCACHE, "run", "--"])
        r = read_report(rep)
        same(j("real-ok.bin"), j("warm.bin"), "warm process: every answer as NVIDIA's")
        check(len(r) == 2 and all(x["nvrtc-loaded"] == "no" and x["misses"] == 0 for x in r),
              f"warm process: all hits, NVIDIA's library never loaded (report {r})")

        # Two processes missing the same keys at once: each key is compiled once.
        flight_env = dict(run_env, KCACHE_DIR=j("flight-cache"))
        procs = [subprocess.Popen([KCACHE, "run", "--", CALLS, j("flight%d.bin" % i), INCLUDE] +
                                  ([REAL] if MODE == "dlopen" else
                                   [os.path.basename(REAL)] if MODE == "dlopen-soname" else []),
                                  env=flight_env) for i in range(2)]
        pids = {p.pid for p in procs}
        check(all(p.wait() == 0 for p in procs), "two processes at once: both exit 0")
        r = [x for x in read_report(rep) if x["pid"] in pids]
        misses, hits = sum(x["misses"] for x in r), sum(x["hits"] for x in r)
        same(j("real.bin"), j("flight0.bin"), "two processes at once: the first's answers")
        same(j("real.bin"), j("flight1.bin"), "two processes at once: the second's answers")
        # broken.cu stores nothing: each process compiles it.
        check(len(r) == 2 and misses == N_CASES + 1 and hits == N_CASES - 1,
              f"two processes at once: every key compiled once ({misses} misses, {hits} hits)")

        # What is not cached: forwarded as NVIDIA's, counted by reason.
        if MODE == "linked":
            unc = dict(env, NVRTC_CALLS_UNCACHED="1")
            calls(j("unc-real.bin"), unc, INCLUDE)
            calls(j("unc-shim.bin"), dict(run_env, NVRTC_CALLS_UNCACHED="1"), INCLUDE,
                  [KCACHE, "run", "--"])
            r = parent(read_report(rep))
            same(j("unc-real.bin"), j("unc-shim.bin"),
                 "OptiX IR, no -arch, a flow callback, an include kcache cannot follow: every "
                 "answer as NVIDIA's")
            check(r.get("optix-ir") == 1 and r.get("no-arch") == 1 and
                  r.get("flow-callback") == 1 and r.get("not-keyable") == 1,
                  f"OptiX IR, no -arch, a flow callback, an include kcache cannot follow: "
                  f"each counted by reason ({r})")

        # LD_PRELOAD by hand: the drop-in finds NVIDIA's library itself. LD_PRELOAD
        # splits on spaces with no escape, so under a path with one (a checkout in
        # "My Projects") it names the file and LD_LIBRARY_PATH its folder, as the
        # README says and `kcache run` does.
        preload = dict(run_env, LD_PRELOAD=shim)
        if " " in shim:
            folder, name = os.path.split(shim)
            preload.update(LD_PRELOAD=name, LD_LIBRARY_PATH=folder + ":" +
                           run_env.get("LD_LIBRARY_PATH", ""))
        calls(j("preload.bin"), preload, INCLUDE)
        r = read_report(rep)
        same(j("real.bin"), j("preload.bin"), "LD_PRELOAD by hand: every answer as NVIDIA's")
        check(parent(r).get("hits") == N_CASES - 1, f"LD_PRELOAD by hand: hits (report {r})")

        # KCACHE_DISABLE=1: a pure forwarder.
        before = stats(env)
        calls(j("disabled.bin"), dict(run_env, KCACHE_DISABLE="1"), INCLUDE,
              [KCACHE, "run", "--"])
        r = read_report(rep)
        after = stats(env)
        same(j("real.bin"), j("disabled.bin"), "KCACHE_DISABLE=1: every answer as NVIDIA's")
        check(after["hits"] == before["hits"] and after["misses"] == before["misses"],
              "KCACHE_DISABLE=1: the cache is not touched")

        # A header edit is never stale: the -I header changes, the bytes follow NVIDIA's.
        inc = j("include")
        shutil.copytree(INCLUDE, inc)
        calls(j("edit-before.bin"), run_env, inc, [KCACHE, "run", "--"])
        read_report(rep)
        with open(os.path.join(inc, "shim_axpb.h"), "a") as f:
            f.write("__device__ float edited_in_place(float x) { return x - 1; }\n"
                    "#define AXPB_EDITED 1\n")
        # memory.cu gets vec.h in memory: the one on disk is not what NVRTC reads.
        with open(os.path.join(inc, "vec.h"), "a") as f:
            f.write("__device__ float edited_on_disk(float x) { return x; }\n")
        with open(os.path.join(inc, "shim_axpb.h")) as f:
            text = f.read().replace("a * x + b", "a * x - b")
        with open(os.path.join(inc, "shim_axpb.h"), "w") as f:
            f.write(text)
        calls(j("edit-real.bin"), env, inc)
        calls(j("edit-shim.bin"), run_env, inc, [KCACHE, "run", "--"])
        r = read_report(rep)
        same(j("edit-real.bin"), j("edit-shim.bin"), "after a header edit: NVIDIA's new bytes")
        check(not filecmp.cmp(j("edit-before.bin"), j("edit-shim.bin"), shallow=False),
              "after a header edit: not the old bytes")
        check(parent(r).get("misses") == 2,
              f"after a header edit: the -I header's compile misses (and broken.cu), the one "
              f"handed vec.h in memory still hits (report {r})")
    env = base_env(tmp2)
    if MODE == "linked" and shutil.which("nm"):
        # NVIDIA's entry points, each under its version node, and dlopen (unversioned).
        def exported(lib):
            out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True,
                                 text=True, check=True).stdout
            return {ln.split()[-1] for ln in out.splitlines() if ln.strip()}
        real, ours = exported(REAL), exported(SHIM)
        # dlopen, and the functions through which NVRTC reaches the file system
        # (lib/nvrtc-shim/observe.c), all unversioned.
        observed = {"open", "open64", "openat", "openat64", "fopen", "fopen64", "opendir",
                    "realpath", "__xstat", "__xstat64", "__lxstat", "__lxstat64", "stat",
                    "stat64", "lstat", "lstat64", "fstatat", "fstatat64", "statx", "access",
                    "faccessat", "readlink", "statfs", "chdir", "fchdir", "fork", "system",
                    "pthread_create"}
        ours_too = {"dlopen"} | observed
        check(ours == real | ours_too,
              f"the drop-in exports NVIDIA's symbols and versions, dlopen and the observed "
              f"file functions (missing {sorted(real | ours_too - ours)}, "
              f"extra {sorted(ours - real - ours_too)})")
    if MODE == "linked":
        # kcache run as a command: the program's exit status, usage errors.
        p = subprocess.run([KCACHE, "run", "--", "sh", "-c", "exit 3"], env=env)
        check(p.returncode == 3, f"kcache run passes on the exit status ({p.returncode})")
        p = subprocess.run([KCACHE, "run", "-v", "--", "sh", "-c", "exit 4"], env=env,
                           capture_output=True, text=True)
        check(p.returncode == 4, f"kcache run -v passes on the exit status ({p.returncode})")
        p = subprocess.run([KCACHE, "run"], env=env, capture_output=True, text=True)
        check(p.returncode == 2 and p.stderr.startswith("kcache: ") and
              len(p.stderr.splitlines()) == 1, f"kcache run without a command: {p.stderr!r}")
        other = os.path.join(tmp2, "other.db")
        p = subprocess.run([KCACHE, "--path", other, "run", "--", CALLS,
                            os.path.join(tmp2, "p.bin"), INCLUDE], env=env)
        st = json.loads(subprocess.run([KCACHE, "--path", other, "stats", "--json"], env=env,
                                       capture_output=True, text=True).stdout)
        check(p.returncode == 0 and st["misses"] >= N_CASES - 1,
              f"kcache --path FILE run: the program's cache is FILE ({st['misses']} misses)")
        p = subprocess.run([KCACHE, "run", "-v", "--", CALLS, os.path.join(tmp2, "v.bin"),
                            INCLUDE], env=env, capture_output=True, text=True)
        check(p.returncode == 0 and "kcache: nvrtc pid" in p.stderr and "hits" in p.stderr,
              f"kcache run -v reports per process: {p.stderr!r}")
    shutil.rmtree(tmp2, ignore_errors=True)
    return check.status()


if __name__ == "__main__":
    sys.exit(main())

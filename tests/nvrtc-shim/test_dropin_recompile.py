#!/usr/bin/env python3
"""`kcache verify --recompile` rebuilds the drop-in's entries with the NVRTC
that made them, and never judges one it cannot rebuild from what made it.

test_dropin_recompile.py NVRTC_ONE_RUNPATH

A program whose RUNPATH ($ORIGIN/nvlib) holds a copy of NVIDIA's NVRTC
compiles, under `kcache run`, a kernel that includes a header from -I (on
disk) and one handed over in memory, with a name expression, to sm_90 and
asks for its CUBIN and PTX (the PTX kept beside the CUBIN). Then:
  - verify --recompile: both entries identical (rebuilt by that NVRTC);
  - the disk header edited: skipped, saying why, and the entries kept;
  - the header as it was (a new file, the same bytes): identical again;
  - with line information, from another directory: skipped, saying where;
  - the inputs of an entry gone (as made before the drop-in kept them):
    skipped, saying so;
  - another build of NVRTC at its path, then none: skipped, saying so.
"""
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pyhelp"))
import kctest  # noqa: E402
from nvrtc_copies import nvrtc_copy, other_build  # noqa: E402 (beside this script)

ONE_RUNPATH = os.path.abspath(sys.argv[1])
KCACHE = os.environ["KCACHE_EXE"]
REAL = os.environ["NVRTC_REAL"]
SONAME = os.path.basename(REAL)
KERNEL = ('#include "disk.h"\n#include "mem.h"\n'
          'template <int N> __global__ void k(float *p) { p[0] = D * M * N; }\n')

check = kctest.Tally()


def base_env(tmp):
    # No NVRTC on LD_LIBRARY_PATH: the program finds its own through its RUNPATH.
    return kctest.dropin_env(tmp, lambda d: os.path.exists(os.path.join(d, SONAME)))


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def verify(env, cwd):
    p = subprocess.run([KCACHE, "verify", "--recompile", "--json"], env=env, cwd=cwd,
                       capture_output=True, text=True)
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        print(p.stdout, p.stderr)
        doc = {}
    return p.returncode, doc.get("recompile", {}), doc


def drop_in_entries(env):
    p = subprocess.run([KCACHE, "ls", "--json"], env=env, capture_output=True, text=True)
    return sorted(e["kind"] for e in json.loads(p.stdout)["entries"] if e["kind"] != "data")


def main():
    with tempfile.TemporaryDirectory(prefix="kcache dropin recompile ") as tmp:
        # The program asks for the PTX too, so that the drop-in keeps it beside the CUBIN.
        env = dict(base_env(tmp), NVRTC_ONE_PTX_TOO="1")
        work = os.path.join(tmp, "work")
        write(os.path.join(work, "k.cu"), KERNEL)
        write(os.path.join(work, "inc", "disk.h"), "#define D 3\n")
        write(os.path.join(work, "mem.h"), "#define M 5\n")
        bindir = os.path.join(tmp, "venv", "bin")
        lib = nvrtc_copy(REAL, os.path.join(bindir, "nvlib"))
        exe = os.path.join(bindir, os.path.basename(ONE_RUNPATH))
        shutil.copy2(ONE_RUNPATH, exe)
        argv = [exe, os.path.join(tmp, "out"), "k.cu", "k.cu", "-H", "mem.h=mem.h",
                "-E", "k<2>", "--", "-arch=sm_90", "-Iinc"]
        p = subprocess.run([KCACHE, "run", "--"] + argv, env=env, cwd=work,
                           capture_output=True, text=True)
        check(p.returncode == 0, f"the program ran under the drop-in ({p.stderr})")
        check(drop_in_entries(env) == ["cubin", "ptx"], "a CUBIN and its PTX stored")

        rc, rec, doc = verify(env, work)
        check(rc == 0 and rec.get("identical") == 2 and rec.get("different") == 0,
              f"rebuilt with the NVRTC that made them, byte for byte: {rec}")

        # An edit of the header on disk: the entries stand, unjudged.
        write(os.path.join(work, "inc", "disk.h"), "#define D 4\n")
        rc, rec, _ = verify(env, work)
        reasons = rec.get("skipped_by_reason", {})
        check(rc == 0 and rec.get("identical") == 0 and rec.get("skipped", 0) >= 2 and
              any("headers on disk" in r for r in reasons),
              f"a header edited since: skipped, saying why: {rec}")
        check(drop_in_entries(env) == ["cubin", "ptx"], "and both entries are still there")
        time.sleep(0.01)
        write(os.path.join(work, "inc", "disk.h"), "#define D 3\n")
        rc, rec, _ = verify(env, work)
        check(rec.get("identical") == 2, f"the header as it was: identical again: {rec}")

        # Line information holds the directory: rebuilt there only.
        argv_g = argv[:-2] + ["-arch=compute_90", "-lineinfo", "-Iinc"]
        p = subprocess.run([KCACHE, "run", "--"] + argv_g, env=env, cwd=work,
                           capture_output=True, text=True)
        rc, rec, _ = verify(env, work)
        check(rec.get("identical") == 3, f"with line information, from where it ran: {rec}")
        other = os.path.join(tmp, "elsewhere")
        shutil.copytree(work, other)
        rc, rec, _ = verify(env, other)
        reasons = rec.get("skipped_by_reason", {})
        check(rec.get("identical") == 2 and any("directory it was made in" in r for r in reasons),
              f"from another directory, the line information's entry is skipped: {rec}")

        # Made before the drop-in kept what it compiled: no inputs.
        db = sqlite3.connect(os.path.join(env["KCACHE_DIR"], "kcache.db"))
        db.execute("DELETE FROM entry_input")
        db.commit()
        db.close()
        rc, rec, _ = verify(env, work)
        reasons = rec.get("skipped_by_reason", {})
        check(rec.get("identical") == 0 and
              any("before it kept" in r for r in reasons),
              f"entries that kept no inputs: skipped, saying so: {rec}")

        # The NVRTC that made them gone.
        p = subprocess.run([KCACHE, "clear"], env=env, capture_output=True, text=True)
        p = subprocess.run([KCACHE, "run", "--"] + argv, env=env, cwd=work,
                           capture_output=True, text=True)
        check(other_build(lib), "the copy's build-id rewritten")
        rc, rec, _ = verify(env, work)
        reasons = rec.get("skipped_by_reason", {})
        check(rec.get("identical") == 0 and rec.get("different") == 0 and
              any("another build" in r for r in reasons),
              f"another build of NVRTC at that path: skipped, saying so: {rec}")
        shutil.rmtree(os.path.join(bindir, "nvlib"))
        rc, rec, _ = verify(env, work)
        reasons = rec.get("skipped_by_reason", {})
        check(rec.get("identical") == 0 and rec.get("failed", 0) == 0 and
              any("not here" in r for r in reasons),
              f"the NVRTC that made them is gone: skipped, saying so: {rec}")
    return check.status()


if __name__ == "__main__":
    sys.exit(main())

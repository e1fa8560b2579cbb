#!/usr/bin/env python3
"""A hit never loads NVIDIA's NVRTC, even when the program asks first what
PyTorch and CuPy ask (nvrtcVersion, nvrtcGetNumSupportedArchs,
nvrtcGetSupportedArchs) and the library's file name holds no version (pip's
libnvrtc.so.13). And the answer is never one another build gave.

test_facts.py NVRTC_ONE_RUNPATH KCACHE_FILL

The program's RUNPATH ($ORIGIN/nvlib) holds a copy of NVIDIA's library under
its soname. A first process under `kcache run` misses and loads NVRTC; a
second asks its questions, then hits, and must not load it; its answers must
be NVIDIA's. A touched file of the same build answers from what the build
said; a file of another build (the same library with its GNU build-id
changed) is asked, and its answer is its own. A record only the NVRTC here
wrote is believed: one arriving in a bundle (forged, or from a machine whose
file only claims the build) is never exported, imported or answered.
"""
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

from nvrtc_copies import build_id, nvrtc_copy, other_build, other_release_string  # noqa: E501
from shim_report import read_report

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pyhelp"))
import kctest  # noqa: E402

ONE_RUNPATH = os.path.abspath(sys.argv[1])
FILL = os.path.abspath(sys.argv[2])
KCACHE = os.environ["KCACHE_EXE"]
REAL = os.environ["NVRTC_REAL"]
SONAME = os.path.basename(REAL)
KERNEL = '__global__ void k(float *p) { p[0] = 7.0f * p[1]; }\n'

check = kctest.Tally()


def base_env(tmp):
    # No NVRTC on LD_LIBRARY_PATH: the program finds its own through its RUNPATH.
    return kctest.dropin_env(tmp, lambda d: os.path.exists(os.path.join(d, SONAME)),
                             unset=("NVRTC_ONE_VERSION",))


def main():
    with tempfile.TemporaryDirectory(prefix="kcache facts ") as tmp:
        env = base_env(tmp)
        work = os.path.join(tmp, "work")
        os.makedirs(work)
        with open(os.path.join(work, "k.cu"), "w") as f:
            f.write(KERNEL)
        bindir = os.path.join(tmp, "venv", "bin")
        lib = nvrtc_copy(REAL, os.path.join(bindir, "nvlib"))
        exe = os.path.join(bindir, os.path.basename(ONE_RUNPATH))
        shutil.copy2(ONE_RUNPATH, exe)
        rep = os.path.join(tmp, "report")
        argv = ["k.cu", "k.cu", "--", "-arch=compute_90"]

        def one(tag, ask, shim=True):
            out = os.path.join(tmp, tag)
            e = dict(env, NVRTC_ONE_VERSION=ask, KCACHE_NVRTC_REPORT=rep)
            cmd = ([KCACHE, "run", "--"] if shim else []) + [exe, out] + argv
            rc = kctest.run_logged(cmd, e, work)
            r = read_report(rep)
            return (kctest.read_bytes(out) if rc == 0 else b"exit %d" % rc), (r[-1] if r else {})

        ref, _ = one("plain", "1", shim=False)
        asked = ref.split(b"\n", 1)[0]
        check(asked.startswith(b"version rc 0 ") and b"-1" not in asked and b"archs rc 0 " in asked,
              f"NVIDIA's NVRTC answers ({asked})")
        out, r = one("miss", "1")
        check(out == ref and r.get("misses") == 1 and r.get("nvrtc-loaded") == "yes",
              f"first process: a miss compiled by NVIDIA's NVRTC, its answers ({r})")
        out, r = one("hit", "1")
        check(out == ref, "second process: NVIDIA's answers and bytes")
        check(r.get("hits") == 1 and r.get("nvrtc-loaded") == "no",
              f"second process: version, architectures, then a hit, NVRTC never loaded ({r})")
        out, r = one("only", "only")
        check(out == asked + b"\n" and r.get("nvrtc-loaded") == "no",
              f"a process that only asks: NVIDIA's answers without loading it ({r})")
        stats = subprocess.run([KCACHE, "stats", "--json"], env=env, capture_output=True,
                               text=True)
        check(stats.returncode == 0 and '"hits": 1,' in stats.stdout and
              '"misses": 1,' in stats.stdout,
              "the questions count no hit and no miss: one compile missed, one hit")

        # Touched: the same build, so what it said still holds.
        later = time.time() + 5
        os.utime(lib, (later, later))
        out, r = one("touched", "only")
        check(out == asked + b"\n" and r.get("nvrtc-loaded") == "no",
              f"a touched file of the same build answers from what the build said ({r})")

        # NVRTC replaced after the process read its build-id (the record answered) and
        # before the miss loaded it: the new build's kernel is not filed under the old.
        orig = lib + ".orig"
        shutil.copy2(lib, orig)
        go = os.path.join(tmp, "go")
        argv_x = argv + ["-DREPLACED=1"]
        e = dict(env, NVRTC_ONE_VERSION="1", NVRTC_ONE_PAUSE=go, KCACHE_NVRTC_REPORT=rep)
        proc = subprocess.Popen([KCACHE, "run", "--", exe, os.path.join(tmp, "paused")] + argv_x,
                                env=e, cwd=work)
        for _ in range(3000):
            if os.path.exists(go + ".ready") or proc.poll() is not None:
                break
            time.sleep(0.01)
        check(other_build(lib) and other_release_string(lib), "NVRTC replaced by another build")
        open(go, "w").close()
        check(proc.wait(timeout=120) == 0, "the paused process compiles")
        shutil.copy2(orig, lib + ".new")
        os.rename(lib + ".new", lib)
        argv, saved_argv = argv_x, argv
        plain, _ = one("replaced-plain", "1", shim=False)
        out, r = one("replaced-after", "1")
        argv = saved_argv
        check(out == plain, f"the first build again: its own kernel, not the build that "
              f"replaced it meanwhile ({r})")

        # Another build under the same name: asked, never answered for.
        check(other_build(lib), "the copy's build-id rewritten")
        out, r = one("other", "only")
        check(out == asked + b"\n" and r.get("nvrtc-loaded") == "yes",
              f"another build: NVRTC is loaded and answers itself ({r})")
        out, r = one("other-again", "1")
        check(out == ref and r.get("misses") == 1,
              f"another build: its own miss (the key holds the build) ({r})")
        out, r = one("other-hit", "1")
        check(out == ref and r.get("hits") == 1 and r.get("nvrtc-loaded") == "no",
              f"another build, next process: what that build said, a hit, NVRTC not loaded "
              f"({r})")

        # The record stays on this machine: an export leaves it out.
        bundle = os.path.join(tmp, "facts.kcache")
        p = subprocess.run([KCACHE, "export", bundle], env=env, capture_output=True, text=True)
        check(p.returncode == 0, f"export: {p.stderr}")
        e = dict(env, KCACHE_DIR=os.path.join(tmp, "imported"))
        p = subprocess.run([KCACHE, "import", bundle], env=e, capture_output=True, text=True)
        ls = subprocess.run([KCACHE, "ls", "--namespace", "kcache.nvrtc", "--json"], env=e,
                            capture_output=True, text=True)
        check(p.returncode == 0 and ls.returncode == 0 and
              json.loads(ls.stdout)["entries"] == [],
              f"an export leaves the drop-in's records out ({p.stderr}{ls.stdout})")

        # A forged record for this very build, in a bundle: never imported, never answered.
        forged_src = os.path.join(tmp, "forged-bundle")
        with open(os.path.join(tmp, "forged.txt"), "w") as f:
            f.write("kcache nvrtc facts 1\nversion 12 9\narchs 1 75\n")
        os.makedirs(forged_src)
        p = subprocess.run([FILL, os.path.join(forged_src, "kcache.db"), "1", "--namespace",
                            "kcache.nvrtc", "--caller-key",
                            f"{SONAME} build-id {build_id(lib)}", "--data",
                            os.path.join(tmp, "forged.txt")], capture_output=True, text=True)
        check(p.returncode == 0, f"kcache-fill: {p.stderr}")
        db = sqlite3.connect(os.path.join(forged_src, "kcache.db"))  # a bundle's journal
        db.execute("PRAGMA journal_mode = DELETE")
        db.close()
        e = dict(env, KCACHE_DIR=os.path.join(tmp, "victim"))
        p = subprocess.run([KCACHE, "import", os.path.join(forged_src, "kcache.db")], env=e,
                           capture_output=True, text=True)
        check(p.returncode == 0, f"a bundle holding such a record still imports ({p.stderr})")
        env, saved = e, env
        out, r = one("forged", "only")
        env = saved
        check(out == asked + b"\n" and r.get("nvrtc-loaded") == "yes",
              f"a forged record from a bundle: NVIDIA's answers, from NVRTC ({out}, {r})")

        # No build-id: nothing tells this build from another whose bytes differ, so no
        # kernel of it is kept, and none is served to the other.
        check(other_build(lib, drop=True), "the copy's build-id note removed")
        out, r = one("noid", "1")
        check(out == ref and r.get("misses", 0) == 0 and r.get("hits", 0) == 0,
              f"a library without a build-id: NVIDIA's answers, nothing kept ({r})")
        check(other_release_string(lib), "a build without a build-id whose PTX differs")
        plain, _ = one("noid-other-plain", "1", shim=False)
        out, r = one("noid-other", "1")
        check(plain != ref and out == plain,
              f"another build without a build-id: its own bytes, not the first one's ({r})")

        # The cache off: NVRTC answers, as without kcache.
        e = dict(env, KCACHE_DISABLE="1")
        env, saved = e, env
        out, r = one("disabled", "only")
        env = saved
        check(out == asked + b"\n", "KCACHE_DISABLE=1: NVIDIA's answers")
    return check.status()


if __name__ == "__main__":
    sys.exit(main())

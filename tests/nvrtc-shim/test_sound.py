#!/usr/bin/env python3
"""The drop-in never serves a stale kernel: headers edited after they aged.

test_sound.py NVRTC_ONE NVRTC_ONE_RUNPATH NVRTC_ONE_LOADER NVRTC_ONE_MODULE NVRTC_ONE_DLOPEN
              NVRTC_LOADER_PLAIN NVRTC_ONE_DLOPEN_MODULE

Each case builds a small tree, compiles it once with NVIDIA's library alone
(the reference) and twice under `kcache run` (a miss, then a hit or another
miss), edits an OLD file (KCACHE_TEST_CLOCK_SHIFT_NS makes kcache treat every
file as 10 s old, and every edit changes the file's ctime, as a real wait
would), and compiles again both ways. Under the drop-in, every answer must be
NVIDIA's answer for the files as they are now: uncached is allowed, a stale
kernel is not. Then the real NVRTC: the one the program's RUNPATH names (as
CuPy's and PyTorch's extension modules do), and a byte-identical copy of it in
another directory hits what the first one stored.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from shim_report import read_report  # beside this script

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pyhelp"))
import kctest  # noqa: E402

(ONE, ONE_RUNPATH, LOADER, MODULE, ONE_DLOPEN, LOADER_PLAIN,
 DLOPEN_MODULE) = (os.path.abspath(a) for a in sys.argv[1:8])
KCACHE = os.environ["KCACHE_EXE"]
REAL = os.environ["NVRTC_REAL"]
TOOLKIT = os.path.dirname(os.path.dirname(os.path.realpath(REAL)))
CCCL = os.path.join(TOOLKIT, "include", "cccl")
SONAME = os.path.basename(REAL)



check = kctest.Tally()  # every check printed; the run goes on after a failure


def has_nvrtc(d):
    return os.path.exists(os.path.join(d or ".", SONAME))


def base_env(tmp):
    # No NVRTC on LD_LIBRARY_PATH (meson puts the drop-in's folder there): the
    # programs find NVIDIA's through their RUNPATH or the loader's cache.
    env = kctest.dropin_env(tmp, has_nvrtc)
    env["KCACHE_TEST_CLOCK_SHIFT_NS"] = "10000000000"
    return env


def write(path, text):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    before = os.stat(path).st_ctime_ns if os.path.exists(path) else None
    with open(path, "w") as f:
        f.write(text)
    # An edit must change the file's identity, as one made 10 s later would:
    # a write within the file system's timestamp tick may not.
    while before is not None and os.stat(path).st_ctime_ns == before:
        time.sleep(0.005)
        os.chmod(path, os.stat(path).st_mode)


class Case:
    def __init__(self, tmp, name):
        self.dir = os.path.join(tmp, name)
        self.name = name
        self.out = os.path.join(tmp, name + "-out")
        os.makedirs(self.dir)
        os.makedirs(self.out)

    def compile(self, tag, argv, env, shim, rep):
        out = os.path.join(self.out, tag)
        wrap = [KCACHE, "run", "--"] if shim else []
        e = dict(env, KCACHE_NVRTC_REPORT=rep) if shim else env
        rc = kctest.run_logged(wrap + [ONE, out] + argv, e, self.dir)
        return (kctest.read_bytes(out) if rc == 0 and os.path.exists(out) else b"exit %d" % rc,
                read_report(rep) if shim else [])


def sound_case(tmp, env, name, files, argv, edit):
    """files: {path: text} under the case's folder; argv: nvrtc_one's after OUT;
    edit(dir): the change after which NVIDIA's bytes differ."""
    c = Case(tmp, name)
    rep = os.path.join(tmp, name + "-report")
    for path, text in files.items():
        write(os.path.join(c.dir, path), text)
    ref1, _ = c.compile("ref1", argv, env, False, rep)
    miss, r1 = c.compile("miss", argv, env, True, rep)
    again, r2 = c.compile("again", argv, env, True, rep)
    check(ref1.startswith(b"rc 0"), f"{name}: NVIDIA's library compiles it ({ref1[:200]!r})")
    check(miss == ref1, f"{name}: first run under the drop-in gives NVIDIA's bytes ({r1})")
    check(again == ref1, f"{name}: second run gives NVIDIA's bytes ({r2})")
    edit(c.dir)
    ref2, _ = c.compile("ref2", argv, env, False, rep)
    check(ref2 != ref1 and ref2.startswith(b"rc 0"),
          f"{name}: the edit changes NVIDIA's bytes (else the case shows nothing)")
    after, r3 = c.compile("after", argv, env, True, rep)
    check(after == ref2, f"{name}: after the edit, NVIDIA's new bytes, not the stale kernel "
          f"({'STALE' if after == ref1 else 'other'}; report {r3})")
    after2, r4 = c.compile("after2", argv, env, True, rep)
    check(after2 == ref2, f"{name}: and again ({r4})")


KERNEL = 'extern "C" __global__ void k(int *v) { v[0] = %s; }\n'


def edit_value(path, old, new):
    def edit(d):
        p = os.path.join(d, path)
        with open(p) as f:
            text = f.read()
        assert old in text
        write(p, text.replace(old, new))
    return edit


def cases(tmp, env):
    arch = ["-arch=compute_90"]
    # A "quoted" include inside an in-memory header: NVRTC looks beside the
    # header's name, relative to the working directory.
    sound_case(tmp, env, "memory-header-quoted", {
        "g.h": "#define G_VALUE 1\n",
        "mem/h.h": '#include "g.h"\n',
        "src/k.cu": '#include "h.h"\n' + KERNEL % "G_VALUE",
    }, ["src/k.cu", "src/k.cu", "-H", "h.h=mem/h.h", "--"] + arch,
        edit_value("g.h", "G_VALUE 1", "G_VALUE 5"))
    # A user -I ahead of the toolkit's, holding a header a toolkit header includes.
    with open(os.path.join(CCCL, "cuda", "std", "version")) as f:
        version = f.read()
    sound_case(tmp, env, "shadowed-toolkit-header", {
        "shadow/cuda/std/version": version + "\n#define KC_SHADOW 1\n",
        "k.cu": "#include <cuda/std/cstdint>\n" + KERNEL % "KC_SHADOW",
    }, ["k.cu", "k.cu", "--", "-I", "shadow", "-I", CCCL] + arch,
        edit_value("shadow/cuda/std/version", "KC_SHADOW 1", "KC_SHADOW 5"))
    # Includes the scanner does not see: a digraph, a digit separator.
    sound_case(tmp, env, "digraph-include", {
        "h.h": "#define H_VALUE 1\n",
        "k.cu": '%:include "h.h"\n' + KERNEL % "H_VALUE",
    }, ["k.cu", "k.cu", "--"] + arch, edit_value("h.h", "H_VALUE 1", "H_VALUE 5"))
    sound_case(tmp, env, "digit-separator", {
        "h.h": "#define H_VALUE 1\n",
        "k.cu": "__device__ int f(const char *s) { return 1'0 + s[0]; } "
                "__device__ const char *s = \"'/*\";\n"
                '#include "h.h"\n' + KERNEL % "H_VALUE",
    }, ["k.cu", "k.cu", "--"] + arch, edit_value("h.h", "H_VALUE 1", "H_VALUE 5"))
    # __has_include reached through a macro; the edit creates the file.
    def create_opt(d):
        write(os.path.join(d, "opt.h"), "\n")
    sound_case(tmp, env, "has-include-macro", {
        "k.cu": '#define HAS_OPT __has_include("opt.h")\n'
                "#if HAS_OPT\n#define VALUE 5\n"
                "#else\n#define VALUE 1\n#endif\n" + KERNEL % "VALUE",
    }, ["k.cu", "k.cu", "--"] + arch, create_opt)


def system_trees(tmp, env):
    """Headers under /dev/shm, or reached through /proc/self/cwd, are a user's
    files like any other: the drop-in judges what NVRTC read there, and a
    header created after the first compile (__has_include in a -D value,
    which the resolver does not probe) is never a stale hit."""
    # <opt.h>: searched in the -I folder alone (a quoted name is looked for
    # beside the source first, which the drop-in judges already).
    has = ['-DHAS=__has_include(<opt.h>)']
    src = {"k.cu": "#if HAS\n#define VALUE 5\n#else\n#define VALUE 1\n#endif\n"
                   + KERNEL % "VALUE",
           "inc/other.h": "\n"}
    shm = None
    try:
        shm = tempfile.mkdtemp(prefix="kcache-sound-", dir="/dev/shm")
    except OSError as e:
        print(f"SKIP dev-shm case: /dev/shm is not writable here ({e})")
    if shm:
        try:
            inc = os.path.join(shm, "inc")
            os.makedirs(inc)
            sound_case(tmp, env, "dev-shm-include", src,
                       ["k.cu", "k.cu", "--", "-arch=compute_90", "-I", inc] + has,
                       lambda d: write(os.path.join(inc, "opt.h"), "\n"))
        finally:
            shutil.rmtree(shm, ignore_errors=True)
    # The program runs in the case's folder: /proc/self/cwd/inc is its inc/.
    sound_case(tmp, env, "proc-self-cwd-include", src,
               ["k.cu", "k.cu", "--", "-arch=compute_90", "-I", "/proc/self/cwd/inc"] + has,
               lambda d: write(os.path.join(d, "inc", "opt.h"), "\n"))


def line_info(tmp, env):
    """-lineinfo writes the working directory into the bytes (PTX's .file), and
    LTO-IR holds it with no option at all: the same compile from another
    directory is not the first one's entry. NVRTC strips white space around an
    option: " -lineinfo" is -lineinfo."""
    e = dict(env, KCACHE_DIR=os.path.join(tmp, "lineinfo-cache"))
    rep = os.path.join(tmp, "lineinfo-report")
    for n, opt in enumerate(("-lineinfo", "-G", "-dlto", " -lineinfo", "-G\t")):
        outs = []
        for d in ("checkout-a", "checkout-bb"):
            c = Case(tmp, f"{d}{opt.strip()}-{n}")
            write(os.path.join(c.dir, "k.cu"), KERNEL % "3")
            arch = "-arch=sm_90" if "-dlto" in opt else "-arch=compute_90"
            argv = ["k.cu", "k.cu", "--", arch, opt]
            real, _ = c.compile("real", argv, e, False, rep)
            shim, r = c.compile("shim", argv, e, True, rep)
            check(shim == real, f"{opt!r} in {d}: NVIDIA's bytes, with this directory's "
                  f"paths ({r})")
            outs.append(real)
        check(outs[0] != outs[1], f"{opt!r}: the directory is in NVIDIA's bytes (else the "
              "case shows nothing)")


def own_names(tmp, env):
    """The names NVRTC stats for itself (observe.c lets them pass unkeyed):
    files there change nothing NVIDIA's library gives."""
    c = Case(tmp, "own-names")
    write(os.path.join(c.dir, "src", "k.cu"), '#include "mem.h"\n' + KERNEL % "M")
    write(os.path.join(c.dir, "mem.h"), "#define M 2\n")
    argv = ["src/k.cu", "src/k.cu", "-H", "mem.h=mem.h", "--", "-arch=compute_90"]
    before, _ = c.compile("before", argv, env, False, "")
    for name in ("__nv_nvrtc_builtin_header.h", "__nv_name_map", "src/__nv_name_map"):
        write(os.path.join(c.dir, name), "#error read\n#define M 9\n")
    os.rename(os.path.join(c.dir, "mem.h"), os.path.join(c.dir, "mem-moved.h"))
    write(os.path.join(c.dir, "mem.h"), "#error read\n#define M 9\n")
    argv[3] = "mem.h=mem-moved.h"
    after, _ = c.compile("after", argv, env, False, "")
    check(before == after and before.startswith(b"rc 0"),
          "NVRTC's own names (its builtin header, its name map, an in-memory header's "
          "name) on disk change nothing it gives")


def kinds(e):
    """The kinds of the compiled entries in the cache."""
    p = subprocess.run([KCACHE, "ls", "--json"], env=e, capture_output=True, text=True)
    return sorted(x["kind"] for x in json.loads(p.stdout)["entries"]
                  if x["kind"] != "data") if p.returncode == 0 else None


def ptx_beside(tmp, env):
    """An sm_XX miss stores the PTX beside its CUBIN only when the program asks
    for it, keyed by the CUBIN's own resolution: a header edited between the
    compile and the program's nvrtcGetPTX never files that compile's PTX
    under the edited header's key (a later hit would serve it stale)."""
    e = dict(env, KCACHE_DIR=os.path.join(tmp, "ptx-beside-cache"))
    rep = os.path.join(tmp, "ptx-beside-report")
    c = Case(tmp, "ptx-beside")
    header = os.path.join(c.dir, "inc", "h.h")
    write(header, "#define H_VALUE 1\n")
    write(os.path.join(c.dir, "k.cu"), '#include "h.h"\n' + KERNEL % "H_VALUE")
    argv = ["k.cu", "k.cu", "--", "-arch=sm_90", "-I", "inc"]
    _, r = c.compile("cubin-only", argv, e, True, rep)
    check(r and r[-1].get("misses") == 1 and kinds(e) == ["cubin"],
          f"an sm_XX miss asked for its CUBIN alone stores its CUBIN, no PTX ({kinds(e)}; {r})")
    write(header, "#define H_VALUE 2\n")
    go = os.path.join(tmp, "ptx-beside-go")
    out = os.path.join(c.out, "paused")
    p = subprocess.Popen([KCACHE, "run", "--", ONE, out] + argv, cwd=c.dir,
                         env=dict(e, NVRTC_ONE_PTX_TOO=go, KCACHE_NVRTC_REPORT=rep))
    for _ in range(6000):
        if os.path.exists(go + ".ready") or p.poll() is not None:
            break
        time.sleep(0.01)
    write(header, "#define H_VALUE 3\n")  # after the compile, before the PTX is asked for
    write(go, "")
    check(p.wait() == 0, "the paused program ran")
    ptx_env = dict(e, NVRTC_ONE_PTX_TOO="1")
    ref, _ = c.compile("ref", argv, ptx_env, False, rep)
    for tag in ("second", "third"):
        got, r = c.compile(tag, argv, ptx_env, True, rep)
        ptx, ref_ptx = (os.path.join(c.out, t + ".ptx") for t in (tag, "ref"))
        check(got == ref and os.path.exists(ptx) and
              kctest.read_bytes(ptx) == kctest.read_bytes(ref_ptx),
              f"{tag} run: NVIDIA's CUBIN and PTX for the header as it is now, not the PTX of "
              f"the compile before the edit ({r})")
    check(r and r[-1].get("hits") == 1 and r[-1].get("nvrtc-loaded") == "no",
          f"the third run's CUBIN and PTX are both hits ({r})")


def nvrtc_copy(d):
    """A byte-identical copy of NVIDIA's NVRTC (and its builtins) in d."""
    os.makedirs(d, exist_ok=True)
    src = os.path.dirname(os.path.realpath(REAL))
    for f in os.listdir(src):
        if f.startswith("libnvrtc") and ".alt." not in f and not os.path.islink(
                os.path.join(src, f)):
            shutil.copy2(os.path.join(src, f), os.path.join(d, f))
    # The soname, as a pip wheel ships it (a file, not a link).
    if not os.path.exists(os.path.join(d, SONAME)):
        shutil.copy2(os.path.realpath(REAL), os.path.join(d, SONAME))
    return os.path.realpath(os.path.join(d, SONAME))


def mapped(out):
    """The NVIDIA NVRTC files the process had mapped (not the drop-in)."""
    shim = os.path.realpath(subprocess.run([KCACHE, "run", "--print-shim"],
                                           capture_output=True, text=True).stdout.strip())
    with open(out + ".maps") as f:
        paths = {os.path.realpath(ln.strip()) for ln in f if ln.strip()}
    return {p for p in paths if p != shim and "builtins" not in p}


def real_nvrtc(tmp, env):
    k = os.path.join(tmp, "rp")
    os.makedirs(k)
    write(os.path.join(k, "k.cu"), KERNEL % "7")
    argv = ["k.cu", "k.cu", "--", "-arch=compute_90"]
    # An executable whose RUNPATH ($ORIGIN/nvlib) holds NVRTC, a module
    # loaded by a program without NVRTC, NEEDing it through its own RUNPATH
    # (CuPy's and PyTorch's extension modules), and an executable that
    # dlopen()s it by name through its RUNPATH, from the executable and from a
    # module the program has no RUNPATH of its own for.
    loaders = {"module": LOADER, "dlopen-module": LOADER_PLAIN}
    for kind, prog in (("executable", ONE_RUNPATH), ("module", MODULE),
                       ("dlopen", ONE_DLOPEN), ("dlopen-module", DLOPEN_MODULE)):
        bindir = os.path.join(tmp, kind, "bin")
        os.makedirs(bindir)
        lib = nvrtc_copy(os.path.join(bindir, "nvlib"))
        exe = os.path.join(bindir, os.path.basename(prog))
        shutil.copy2(prog, exe)
        cmd = [loaders[kind], exe] if kind in loaders else [exe]
        e = dict(env, KCACHE_DIR=os.path.join(tmp, kind + "-cache"))
        rep = os.path.join(tmp, kind + "-report")
        out = os.path.join(tmp, kind + "-plain")
        check(kctest.run_logged(cmd + [out] + argv, e, k) == 0 and mapped(out) == {lib},
              f"RUNPATH {kind}: without the drop-in the program loads {lib}")
        out = os.path.join(tmp, kind + "-shim")
        rc = kctest.run_logged([KCACHE, "run", "--"] + cmd + [out] + argv,
                 dict(e, KCACHE_NVRTC_REPORT=rep), k)
        r = read_report(rep)
        got = mapped(out) if rc == 0 else "exit %d" % rc
        check(got == {lib} and r and r[-1].get("misses") == 1,
              f"RUNPATH {kind}: the drop-in's miss is compiled by the NVRTC the program "
              f"would have loaded ({got}; report {r})")
        check(kctest.read_bytes(out) == kctest.read_bytes(os.path.join(tmp, kind + "-plain")),
              f"RUNPATH {kind}: NVIDIA's bytes")
    # The key holds the real library's build, not its path: a byte-identical
    # copy in another directory (another venv) hits.
    e = dict(env, KCACHE_DIR=os.path.join(tmp, "copies-cache"))
    rep = os.path.join(tmp, "copies-report")
    results = []
    for venv in ("venv-a", "venv-b"):
        bindir = os.path.join(tmp, venv, "bin")
        os.makedirs(bindir)
        nvrtc_copy(os.path.join(bindir, "nvlib"))
        exe = os.path.join(bindir, os.path.basename(ONE_RUNPATH))
        shutil.copy2(ONE_RUNPATH, exe)
        out = os.path.join(tmp, venv + "-out")
        rc = kctest.run_logged([KCACHE, "run", "--", exe, out] + argv,
                               dict(e, KCACHE_NVRTC_REPORT=rep), k)
        results.append((rc, read_report(rep), kctest.read_bytes(out) if rc == 0 else b""))
    (rc_a, r_a, out_a), (rc_b, r_b, out_b) = results
    check(rc_a == 0 and r_a and r_a[-1].get("misses") == 1, f"venv a: a miss ({r_a})")
    check(rc_b == 0 and r_b and r_b[-1].get("hits") == 1 and out_b == out_a,
          f"venv b, a byte-identical NVRTC elsewhere: a hit ({r_b})")


def main():
    with tempfile.TemporaryDirectory(prefix="kcache sound ") as tmp:
        env = base_env(tmp)
        cases(tmp, env)
        system_trees(tmp, env)
        line_info(tmp, env)
        own_names(tmp, env)
        ptx_beside(tmp, env)
        real_nvrtc(tmp, env)
    return check.status()


if __name__ == "__main__":
    sys.exit(main())

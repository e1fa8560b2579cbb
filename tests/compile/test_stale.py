#!/usr/bin/env python3
"""Stale kernels: each way a warm kcache once returned a kernel other than what
plain NVRTC gives for the files as they are now, as an end-to-end test of
`kcache compile` against NVIDIA's NVRTC reading the disk (no GPU needed).

Files are made old without waiting: KCACHE_TEST_CLOCK_SHIFT_NS moves the trust
rule's clock 10 s ahead (lib/resolve/identity.h), and every edit here changes
the file's ctime, as a real wait would.

Usage: test_stale.py KCACHE KCACHE_FILL [TEST-NAME...]; exits 77 without a toolkit.
"""
import ctypes
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli"))
import test_cli as base  # noqa: E402
from test_cli import Cache, Failure, check  # noqa: E402

TOOLKIT = "/usr/local/cuda"
CCCL = TOOLKIT + "/include/cccl"
OLD = {"KCACHE_TEST_CLOCK_SHIFT_NS": str(10 * 10**9)}


class PlainNvrtc:
    """NVIDIA's NVRTC, reading the disk as a program would: the reference."""

    def __init__(self):
        self.lib = ctypes.CDLL(os.path.join(TOOLKIT, "lib64", "libnvrtc.so"))

    def ptx(self, path, options, cwd=None):
        with open(path, "rb") as f:
            src = f.read()
        prog = ctypes.c_void_p()
        name = path.encode()
        if self.lib.nvrtcCreateProgram(ctypes.byref(prog), src, name, 0, None, None):
            raise Failure("nvrtcCreateProgram failed")
        opts = [o.encode() for o in ["--gpu-architecture=compute_90"] + options]
        arr = (ctypes.c_char_p * len(opts))(*opts)
        old = os.getcwd()
        os.chdir(cwd or os.path.dirname(path))
        try:
            rc = self.lib.nvrtcCompileProgram(prog, len(opts), arr)
        finally:
            os.chdir(old)
        if rc:
            n = ctypes.c_size_t()
            self.lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
            log = ctypes.create_string_buffer(n.value)
            self.lib.nvrtcGetProgramLog(prog, log)
            raise Failure("plain NVRTC failed: %s" % log.value.decode(errors="replace"))
        n = ctypes.c_size_t()
        self.lib.nvrtcGetPTXSize(prog, ctypes.byref(n))
        buf = ctypes.create_string_buffer(n.value)
        self.lib.nvrtcGetPTX(prog, buf)
        self.lib.nvrtcDestroyProgram(ctypes.byref(prog))
        return buf.value.decode()


def code(ptx):
    """PTX without its comments: the generated code, which is what must agree."""
    return "\n".join(l for l in ptx.splitlines() if not l.lstrip().startswith("//")).strip()


def write(path, text, keep_stat=None):
    """Writes text; with keep_stat, restores that size-and-mtime (ctime still moves)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    before = os.stat(path).st_ctime_ns if os.path.exists(path) else None
    with open(path, "w") as f:
        f.write(text)
    if keep_stat is not None:
        os.utime(path, ns=(keep_stat.st_atime_ns, keep_stat.st_mtime_ns))
    while before is not None and os.stat(path).st_ctime_ns == before:
        time.sleep(0.01)  # the edit must change the identity, as a real wait would
        os.utime(path, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns))


class Case:
    def __init__(self, root, nvrtc):
        self.root = root
        self.c = Cache(root)
        self.nvrtc = nvrtc

    def kcache(self, src, *opts, old=True):
        out = os.path.join(self.root, "out.ptx")
        args = ["compile", src, "--arch", "sm_90", "--ptx", "-o", out, "--json"]
        if opts:
            args += ["--"] + list(opts)
        o, _ = self.c.run(*args, env=OLD if old else None)
        with open(out) as f:
            return f.read(), o

    def agrees(self, src, *opts, what=""):
        got, report = self.kcache(src, *opts)
        want = self.nvrtc.ptx(src, list(opts))
        check(code(got) == code(want),
              "%s: kcache's kernel differs from NVRTC's\nkcache: %s\nNVRTC:  %s\n%s"
              % (what, grep_values(got), grep_values(want), report))
        return report


def grep_values(ptx):
    return re.findall(r"(?:st\.global\.u32\s+\[[^\]]*\],|mov\.u32\s+%r\d+,)\s*(-?\d+)", ptx)


KERNEL = 'extern "C" __global__ void k(int *o) { o[0] = %s; }\n'


def test_old_header_edit(root, nvrtc):
    t = Case(root, nvrtc)
    d = os.path.join(root, "C")
    write(os.path.join(d, "h.cuh"), "#pragma once\n#define VALUE (20 + 1)\n")
    write(os.path.join(d, "k.cu"), '#include "h.cuh"\n' + KERNEL % "VALUE")
    t.agrees(os.path.join(d, "k.cu"), what="first compile")
    write(os.path.join(d, "h.cuh"), "#pragma once\n#define VALUE (30 + 3)\n")
    t.agrees(os.path.join(d, "k.cu"), what="an old header edited")
    st = os.stat(os.path.join(d, "h.cuh"))
    write(os.path.join(d, "h.cuh"), "#pragma once\n#define VALUE (40 + 7)\n", keep_stat=st)
    t.agrees(os.path.join(d, "k.cu"), what="an edit with size and mtime restored")
    # The same tree twice in one cache: both old, the second is a hit.
    _, report = t.kcache(os.path.join(d, "k.cu"))
    check('"hit": true' in report, "an unchanged old tree hits: %s" % report)


def test_include_through_toolkit_path(root, nvrtc):
    t = Case(root, nvrtc)
    d = os.path.join(root, "proj")
    x = os.path.join(d, "x.h")
    write(x, "#define VALUE 11\n")
    spelled = TOOLKIT + "/" + os.path.relpath(x, os.path.realpath(TOOLKIT))
    write(os.path.join(d, "k.cu"), '#include "%s"\n' % spelled + KERNEL % "VALUE")
    inc = TOOLKIT + "/include"
    angled = os.path.relpath(x, os.path.realpath(inc))
    write(os.path.join(d, "a.cu"), "#include <%s>\n" % angled + KERNEL % "VALUE")
    for src in ("k.cu", "a.cu"):
        t.agrees(os.path.join(d, src), "-I" + inc, what=src)
    write(x, "#define VALUE 12\n")
    for src in ("k.cu", "a.cu"):
        t.agrees(os.path.join(d, src), "-I" + inc, what=src + " after x.h was edited")


def test_toolkit_header_includes_a_shadow(root, nvrtc):
    t = Case(root, nvrtc)
    d = os.path.join(root, "p")
    real = os.path.join(CCCL, "cuda", "std", "version")
    shadow = os.path.join(d, "shadow", "cuda", "std", "version")
    write(shadow, '#include "%s"\n#define SHADOW 5\n' % real)
    write(os.path.join(d, "k.cu"), "#include <cuda/std/cstdint>\n#ifndef SHADOW\n#define SHADOW 1\n"
          "#endif\n" + KERNEL % "SHADOW")
    opts = ("-I" + os.path.join(d, "shadow"), "-I" + CCCL)
    t.agrees(os.path.join(d, "k.cu"), *opts, what="a user directory shadows a toolkit header")
    write(shadow, '#include "%s"\n#define SHADOW 7\n' % real)
    t.agrees(os.path.join(d, "k.cu"), *opts, what="the shadow edited")
    os.unlink(shadow)
    t.agrees(os.path.join(d, "k.cu"), *opts, what="the shadow removed")


def test_shadow_appears_in_a_vouched_directory(root, nvrtc):
    """Names toolkit headers look for in a user directory are vouched for by that
    directory's identity: a header created there later must still be seen."""
    t = Case(root, nvrtc)
    d = os.path.join(root, "v")
    os.makedirs(os.path.join(d, "shadow"))
    write(os.path.join(d, "k.cu"), "#include <cuda/std/cstdint>\n#ifndef SHADOW\n#define SHADOW 1\n"
          "#endif\n" + KERNEL % "SHADOW")
    opts = ("-I" + os.path.join(d, "shadow"), "-I" + CCCL)
    t.agrees(os.path.join(d, "k.cu"), *opts, what="an empty user directory first")
    _, report = t.kcache(os.path.join(d, "k.cu"), *opts)
    check('"hit": true' in report, "a hit before the shadow appears: %s" % report)
    time.sleep(0.05)  # a new name changes the directory's mtime in a later tick
    real = os.path.join(CCCL, "cuda", "std", "version")
    write(os.path.join(d, "shadow", "cuda", "std", "version"),
          '#include "%s"\n#define SHADOW 9\n' % real)
    t.agrees(os.path.join(d, "k.cu"), *opts, what="a shadow created after the hit")


def test_no_source_include(root, nvrtc):
    """With -no-source-include NVRTC looks beside no file, not even a header on disk."""
    t = Case(root, nvrtc)
    d = os.path.join(root, "n")
    write(os.path.join(d, "inc", "x.h"), '#include "y.h"\n')
    write(os.path.join(d, "inc", "y.h"), "#define Y 2\n")
    write(os.path.join(d, "y.h"), "#define Y 1\n")
    write(os.path.join(d, "k.cu"), '#include "inc/x.h"\n' + KERNEL % "Y")
    t.agrees(os.path.join(d, "k.cu"), "-I" + d, "-no-source-include", what="-no-source-include")
    t.agrees(os.path.join(d, "k.cu"), "-I" + d, what="without it")


def test_pre_include_from_the_working_directory(root, nvrtc):
    """-include p.h: NVRTC looks in the working directory, then -I; never beside the source."""
    d = os.path.join(root, "w")
    write(os.path.join(d, "src", "p.h"), "#define P 6\n")
    write(os.path.join(d, "pre", "p.h"), "#define P 5\n")
    write(os.path.join(d, "src", "k.cu"), KERNEL % "P")
    c = Cache(root)
    out = os.path.join(root, "w.ptx")
    opts = ["-include", "p.h", "-I" + os.path.join(d, "pre")]
    for step in ("no p.h here", "p.h here", "p.h here edited"):
        if step != "no p.h here":
            write(os.path.join(d, "p.h"), "#define P %d\n" % (7 if step == "p.h here" else 8))
        p = subprocess.run([base.KCACHE, "compile", "src/k.cu", "--arch", "sm_90", "--ptx", "-o", out,
                            "--"] + opts, cwd=d, env=dict(c.env, **OLD), capture_output=True,
                           timeout=120)
        check(p.returncode == 0, "%s: %s" % (step, p.stderr.decode()))
        with open(out) as f:
            got = f.read()
        want = nvrtc.ptx(os.path.join(d, "src", "k.cu"), opts, cwd=d)
        check(code(got) == code(want), "%s: kcache %s, NVRTC %s"
              % (step, grep_values(got), grep_values(want)))


def test_stdh_beside_an_extensionless_name(root, nvrtc):
    """NVRTC looks for NAME.stdh where an extensionless NAME is not, in every directory."""
    t = Case(root, nvrtc)
    d = os.path.join(root, "x")
    write(os.path.join(d, "d", "foo"), "#define V 1\n")
    os.makedirs(os.path.join(d, "e"))
    write(os.path.join(d, "k.cu"), "#include <foo>\n" + KERNEL % "V")
    opts = ("-I" + os.path.join(d, "e"), "-I" + os.path.join(d, "d"))
    t.agrees(os.path.join(d, "k.cu"), *opts, what="d/foo")
    time.sleep(0.05)
    write(os.path.join(d, "e", "foo.stdh"), "#define V 3\n")
    t.agrees(os.path.join(d, "k.cu"), *opts, what="e/foo.stdh created ahead of d/foo")
    write(os.path.join(d, "e", "foo.stdh"), "#define V 4\n")
    t.agrees(os.path.join(d, "k.cu"), *opts, what="e/foo.stdh edited")


def test_line_info_holds_the_working_directory(root, nvrtc):
    """-lineinfo writes the working directory into the bytes: a run from elsewhere is
    another kernel, the one an empty cache gives there."""
    d = os.path.join(root, "l")
    write(os.path.join(d, "k.cu"), KERNEL % "3")
    shared, empty = Cache(root, "shared"), Cache(root, "empty")
    got = {}
    for where in ("a", "b"):
        os.makedirs(os.path.join(d, where))
        for c in (shared, empty) if where == "b" else (shared,):
            out = os.path.join(root, "%s-%s.ptx" % (where, os.path.basename(c.dir)))
            p = subprocess.run([base.KCACHE, "compile", os.path.join(d, "k.cu"), "--arch", "sm_90",
                                "--ptx", "-o", out, "--", "-lineinfo"], cwd=os.path.join(d, where),
                               env=dict(c.env, PWD=os.path.join(d, where)), capture_output=True,
                               timeout=120)
            check(p.returncode == 0, p.stderr.decode())
            with open(out) as f:
                got[where, os.path.basename(c.dir)] = f.read()
    check(got["b", "shared"] == got["b", "empty"],
          "from b, the shared cache gave a's line information: %s"
          % [l for l in got["b", "shared"].splitlines() if ".file" in l])


def test_white_space_around_an_option(root, nvrtc):
    """NVRTC strips white space around each option: " -G" is -G, whose bytes name the
    working directory, and " -I DIR" a header directory whose headers are inputs."""
    d = os.path.join(root, "w")
    write(os.path.join(d, "k.cu"), KERNEL % "3")
    shared, empty = Cache(root, "w-shared"), Cache(root, "w-empty")
    for opt in (" -G", "-lineinfo\t"):
        got = {}
        for where in ("a", "bb"):
            here = os.path.join(d, where + opt.strip())
            os.makedirs(here)
            for c in (shared, empty) if where == "bb" else (shared,):
                out = os.path.join(root, "%s-%s.ptx" % (where, os.path.basename(c.dir)))
                p = subprocess.run([base.KCACHE, "compile", os.path.join(d, "k.cu"), "--arch",
                                    "sm_90", "--ptx", "-o", out, "--", opt], cwd=here,
                                   env=dict(c.env, PWD=here), capture_output=True, timeout=120)
                check(p.returncode == 0, p.stderr.decode())
                with open(out) as f:
                    got[where, os.path.basename(c.dir)] = f.read()
        check(got["bb", "w-shared"] == got["bb", "w-empty"],
              "%r from bb: the shared cache gave a's directory" % opt)
    t = Case(root, nvrtc)
    write(os.path.join(d, "inc", "h.cuh"), "#define VALUE 4\n")
    write(os.path.join(d, "k2.cu"), '#include "h.cuh"\n' + KERNEL % "VALUE")
    for opt in (" -I" + os.path.join(d, "inc"), "-I " + os.path.join(d, "inc")):
        t.agrees(os.path.join(d, "k2.cu"), opt, what="%r" % opt)
        write(os.path.join(d, "inc", "h.cuh"), "#define VALUE %d\n" % (len(opt) + 10))
        t.agrees(os.path.join(d, "k2.cu"), opt, what="%r, the header edited" % opt)


def test_ltoir_holds_the_working_directory(root, nvrtc):
    """LTO-IR holds the working directory too, without any line-information option:
    from elsewhere it is another kernel, the one an empty cache gives there."""
    d = os.path.join(root, "lto")
    write(os.path.join(d, "k.cu"), KERNEL % "3")
    shared, empty = Cache(root, "lto-shared"), Cache(root, "lto-empty")
    got = {}
    for where in ("a", "bb"):
        os.makedirs(os.path.join(d, where))
        for c in (shared, empty) if where == "bb" else (shared,):
            out = os.path.join(root, "%s-%s.ltoir" % (where, os.path.basename(c.dir)))
            p = subprocess.run([base.KCACHE, "compile", os.path.join(d, "k.cu"), "--arch", "sm_90",
                                "--ltoir", "-o", out], cwd=os.path.join(d, where),
                               env=dict(c.env, PWD=os.path.join(d, where)), capture_output=True,
                               timeout=120)
            check(p.returncode == 0, p.stderr.decode())
            with open(out, "rb") as f:
                got[where, os.path.basename(c.dir)] = f.read()
    check(got["a", "lto-shared"] != got["bb", "lto-empty"],
          "the directory is in NVRTC's LTO-IR (else the case shows nothing)")
    check(got["bb", "lto-shared"] == got["bb", "lto-empty"],
          "from bb, the shared cache gave a's LTO-IR")


def test_one_file_from_two_directories(root, nvrtc):
    """A header reached through a link and through its own directory: NVRTC looks for
    its quoted includes beside each path (found by the soundness harness)."""
    t = Case(root, nvrtc)
    d = os.path.join(root, "y")
    write(os.path.join(d, "d", "h.h"), '#include "x.h"\n')
    write(os.path.join(d, "d", "x.h"), "#undef V\n#define V 1\n")
    write(os.path.join(d, "e", "x.h"), "#undef V\n#define V 2\n")
    os.makedirs(os.path.join(d, "src"))
    os.symlink("../d/h.h", os.path.join(d, "src", "link.h"))
    write(os.path.join(d, "src", "k.cu"), '#include "link.h"\n#include "../d/h.h"\n' + KERNEL % "V")
    t.agrees(os.path.join(d, "src", "k.cu"), "-I" + os.path.join(d, "e"), what="link and target")


def test_shadow_comes_and_goes(root, nvrtc):
    """A shadow written where no directory of it was, edited, removed (its directories
    stay), and written again: the closure that vouched for its absence by the
    directory above must not vouch again once a directory stands between them
    (found by the soundness harness)."""
    t = Case(root, nvrtc)
    d = os.path.join(root, "z")
    real = os.path.join(CCCL, "cuda", "std", "version")
    shadow = os.path.join(d, "shadow", "cuda", "std", "version")
    write(os.path.join(d, "src", "k.cu"), "#include <cuda/std/cstdint>\n#ifndef SHADOW\n"
          "#define SHADOW 1\n#endif\n" + KERNEL % "SHADOW")
    opts = ("-I" + os.path.join(d, "shadow"), "-I" + CCCL)
    src = os.path.join(d, "src", "k.cu")
    t.agrees(src, *opts, what="no shadow, no directory for it")
    for step, value in enumerate((367, 249, None, 877)):
        time.sleep(0.02)  # each change in a later tick than kcache's last look
        if value is None:
            os.unlink(shadow)
        else:
            write(shadow, '#pragma once\n#define SHADOW %d\n#include "%s"\n' % (value, real))
        t.agrees(src, *opts, what="step %d (shadow %s)" % (step, value))


def test_has_include_through_a_macro(root, nvrtc):
    t = Case(root, nvrtc)
    d = os.path.join(root, "m")
    write(os.path.join(d, "k.cu"), '#define HAS_OPT __has_include("opt.h")\n#if HAS_OPT\n'
          '#define V 2\n#else\n#define V 1\n#endif\n' + KERNEL % "V")
    t.agrees(os.path.join(d, "k.cu"), what="opt.h absent")
    write(os.path.join(d, "opt.h"), "\n")
    t.agrees(os.path.join(d, "k.cu"), what="opt.h created")


def test_has_include_in_a_d_value(root, nvrtc):
    """__has_include in -D values, object-like and function-like (the odd spelling
    -D'F(x)=...' included), with the header created later in an -I directory: every
    source of macro text goes through the one scanner (issue 32, item 2)."""
    t = Case(root, nvrtc)
    d = os.path.join(root, "dv")
    inc = "-I" + os.path.join(d, "inc")
    os.makedirs(os.path.join(d, "inc"))
    branch = "#define V 2\n#else\n#define V 1\n#endif\n" + KERNEL % "V"
    write(os.path.join(d, "obj.cu"), "#if HAS\n" + branch)
    write(os.path.join(d, "fn.cu"), '#if HASF("opt.h")\n' + branch)
    write(os.path.join(d, "fn2.cu"), '#if W("opt.h")\n' + branch)
    cases = (("obj.cu", '-DHAS=__has_include("opt.h")'),
             ("obj.cu", "-DHAS=__has_include(<opt.h>)"),
             ("fn.cu", "-DHASF(x)=__has_include(x)"),
             ("fn2.cu", "-DHASF(x)=__has_include(x)", "-DW=HASF"),
             ("obj.cu", "-DHAS=0", "-UHAS", '-DHAS=__has_include("opt.h")'))
    for step in ("opt.h absent", "opt.h created"):
        if step == "opt.h created":
            write(os.path.join(d, "inc", "opt.h"), "\n")
        for src, *opts in cases:
            t.agrees(os.path.join(d, src), inc, *opts, what="%s %s: %s" % (src, opts, step))


def test_wrapper_of_a_wrapper_is_cached(root, nvrtc):
    """A function-like macro that hands its parameter on to another wrapper
    (#define F(x) W(x)) probes nothing itself: F's calls are probed where they
    are made, so the compile is cached, and stays right as opt.h comes."""
    t = Case(root, nvrtc)
    d = os.path.join(root, "ww")
    os.makedirs(os.path.join(d, "inc"))
    inc = "-I" + os.path.join(d, "inc")
    branch = "#define V 2\n#else\n#define V 1\n#endif\n" + KERNEL % "V"
    write(os.path.join(d, "file.cu"), "#define W(y) __has_include(y)\n#define F( x ) W(x)\n"
          '#if F("opt.h")\n' + branch)
    write(os.path.join(d, "dval.cu"), '#if F("opt.h")\n' + branch)
    cases = (("file.cu",), ("dval.cu", "-DW(y)=__has_include(y)", "-DF( x )=W(x)"))
    for step in ("opt.h absent", "opt.h created"):
        if step == "opt.h created":
            write(os.path.join(d, "inc", "opt.h"), "\n")
        for src, *opts in cases:
            report = t.agrees(os.path.join(d, src), inc, *opts, what="%s: %s" % (src, step))
            check('"cached": true' in report, "%s: %s: not cached: %s" % (src, step, report))


def test_has_include_in_a_macro_expanded_elsewhere(root, nvrtc):
    """A quoted __has_include in a macro is looked up beside the file that expands the
    macro, not the one that defines it (checked with NVRTC 13)."""
    t = Case(root, nvrtc)
    d = os.path.join(root, "me")
    write(os.path.join(d, "sub", "opt.h"), "\n")
    branch = "#define V 2\n#else\n#define V 1\n#endif\n"
    write(os.path.join(d, "sub", "def.h"), '#define HAS __has_include("opt.h")\n')
    write(os.path.join(d, "sub", "use.h"), "#if HAS\n" + branch)
    write(os.path.join(d, "defined_beside.cu"), '#include "sub/def.h"\n#if HAS\n' + branch +
          KERNEL % "V")
    write(os.path.join(d, "used_beside.cu"), '#define HAS __has_include("opt.h")\n'
          '#include "sub/use.h"\n' + KERNEL % "V")
    write(os.path.join(d, "d_used_beside.cu"), '#include "sub/use.h"\n' + KERNEL % "V")
    t.agrees(os.path.join(d, "defined_beside.cu"), what="defined beside opt.h, used away")
    t.agrees(os.path.join(d, "used_beside.cu"), what="defined away, used beside opt.h")
    t.agrees(os.path.join(d, "d_used_beside.cu"), '-DHAS=__has_include("opt.h")',
             what="-D, used beside opt.h")
    t.agrees(os.path.join(d, "defined_beside.cu"), "-include", os.path.join(d, "sub", "def.h"),
             what="-include'd beside opt.h, used away")


def test_has_include_through_macro_arguments(root, nvrtc):
    """__has_include reached through a function-like macro's arguments, as the
    preprocessor expands an #if: a wrapper handed in as an argument and called in
    the body, a name pasted with ## or a header name made with #, rescanning with
    the tokens after a call, the same through -D and -include; opt.h created
    later in an -I directory (issue 32, the reviewer's two repros and variants).
    Each must agree with NVRTC; the ones kcache can follow are cached."""
    t = Case(root, nvrtc)
    d = os.path.join(root, "ma")
    os.makedirs(os.path.join(d, "inc"))
    inc = "-I" + os.path.join(d, "inc")
    branch = "#define V 2\n#else\n#define V 1\n#endif\n" + KERNEL % "V"
    w = "#define W(x) __has_include(x)\n"
    files = {
        "callee.cu": w + '#define CALL(m) m("opt.h")\n#if CALL(W)\n',
        "paste.cu": "#define C(a, b) a##b\n#if C(__has_, include)(\"opt.h\")\n",
        "paste_angle.cu": "#define C(a, b) a ## b\n#if C(__has_, include)(<opt.h>)\n",
        "d_paste.cu": '#if C(__has_, include)("opt.h")\n',
        "stringize.cu": w + "#define S(x) #x\n#define CALL(m, a) m(S(a))\n#if CALL(W, opt.h)\n",
        "rescan.cu": w + '#define ID(x) x\n#if ID(W)("opt.h")\n',
        "wrapper_arg.cu": w + "#define S(x) #x\n#if W(S(opt.h))\n",
        "plain_name.cu": w + "#define Q(x) #x\n#define QX(x) Q(x)\n#define NAME opt.h\n"
                         "#if W(QX(NAME))\n",
        "plain_part.cu": "#define CAT(a, b) a##b\n#define CATX(a, b) CAT(a, b)\n"
                         '#define PART include\n#if CATX(__has_, PART)("opt.h")\n',
        "next.cu": '#define C(a, b) a##b\n#if C(__has_include, _next)("opt.h")\n',
        "d_callee.cu": "#if CALL(W)\n",
        "pre.cu": "#if CALL(W)\n",
        "nested.cu": w + "#define CAT(a, b) a##b\n#define AP(f, x) f(x)\n"
                     '#define NAME CAT(o, pt.h)\n#define Q(x) #x\n#define QX(x) Q(x)\n'
                     "#if AP(CAT(, W), QX(NAME))\n",
    }
    write(os.path.join(d, "calls.h"), w + '#define CALL(m) m("opt.h")\n')
    for name, text in files.items():
        write(os.path.join(d, name), text + branch)
    cases = (("callee.cu",), ("paste.cu",), ("paste_angle.cu",),
             ("d_paste.cu", "-DC(a,b)=a##b"), ("stringize.cu",), ("rescan.cu",),
             ("wrapper_arg.cu",), ("plain_name.cu",), ("plain_part.cu",),
             ("next.cu",), ("d_callee.cu", "-DW(x)=__has_include(x)", '-DCALL(m)=m("opt.h")'),
             ("pre.cu", "-include", os.path.join(d, "calls.h")), ("nested.cu",))
    failed = []
    for step in ("opt.h absent", "opt.h created"):
        if step == "opt.h created":
            write(os.path.join(d, "inc", "opt.h"), "\n")
        for src, *opts in cases:
            try:
                report = t.agrees(os.path.join(d, src), inc, *opts,
                                  what="%s %s: %s" % (src, opts, step))
                cached = '"cached": true' in report
                check(cached == (src != "next.cu"), "%s: %s: cached %s" % (src, step, cached))
            except Failure as ex:
                failed.append(str(ex).splitlines()[0])
    check(not failed, "; ".join(failed))


def test_scanner_constructs(root, nvrtc):
    t = Case(root, nvrtc)
    d = os.path.join(root, "s")
    write(os.path.join(d, "h.h"), "#define A 3\n")
    write(os.path.join(d, "g.h"), "#define B 4\n")
    # A digit separator is part of its number: the quote after it opens
    # nothing, and the /* inside the string opens no comment.
    write(os.path.join(d, "sep.cu"), '__device__ int x = 1\'0; __device__ const char *s = "\'/*";\n'
          '#include "h.h"\n#include "g.h"\n' + KERNEL % "A * 10 + B")
    # %: is #: a directive the scanner does not parse, so nothing is trusted.
    write(os.path.join(d, "digraph.cu"), '%:include "h.h"\n#include "g.h"\n' + KERNEL % "A * 10 + B")
    for src in ("sep.cu", "digraph.cu"):
        report = t.agrees(os.path.join(d, src), what=src)
        cached = '"cached": true' in report
        check(cached == (src == "sep.cu"), "%s: cached %s: %s" % (src, cached, report))
        if src == "digraph.cu":
            check("%: digraph" in report, "the reason is given: %s" % report)
    write(os.path.join(d, "h.h"), "#define A 5\n")
    write(os.path.join(d, "g.h"), "#define B 6\n")
    for src in ("sep.cu", "digraph.cu"):
        t.agrees(os.path.join(d, src), what=src + " after both headers were edited")


def test_toolkit_spelled_two_ways(root, nvrtc):
    """Toolkit -I by another spelling: NVRTC's bytes for each (__FILE__ in an assertion)."""
    c = Cache(root, "one")
    d = os.path.join(root, "t")
    src = os.path.join(d, "k.cu")
    write(src, "#include <cuda/std/span>\n"
          'extern "C" __global__ void k(int *o, int i) { cuda::std::span<int, 4> s(o, 4); '
          "s[i] = 1; }\n")
    keys = []
    for inc in (CCCL, os.path.realpath(CCCL), CCCL):
        opts = ["-I" + inc, "-DCCCL_ENABLE_ASSERTIONS", "-std=c++17"]
        out = os.path.join(root, "tk.ptx")
        o, _ = c.run("compile", src, "--arch", "sm_90", "--ptx", "-o", out, "--json", "--", *opts)
        with open(out) as f:
            got = f.read()
        keys.append(re.search(r'"key": "([0-9a-f]+)"', o).group(1))
        want = nvrtc.ptx(src, opts)
        check(code(got) == code(want), "-I %s: not the bytes NVRTC gives" % inc)
    check(keys[0] != keys[1] and keys[0] == keys[2], "a key for each spelling")


def test_header_file_as_nvrtc_opens_it(root, nvrtc):
    """A header's __FILE__ and warnings: the path NVRTC opens it by, for each -I spelling."""
    c = Cache(root, "one")
    for place in ("p1", "p2"):
        d = os.path.join(root, place)
        write(os.path.join(d, "inc", "a.h"), '#pragma once\n#include "sub/../b.h"\n'
              "__device__ const char *where_a() { return __FILE__; }\n")
        write(os.path.join(d, "inc", "b.h"), "__device__ const char *where_b() { return __FILE__; }\n"
              "__device__ int warn_b() { int unused_q; return 3; }\n")
        os.makedirs(os.path.join(d, "inc", "sub"), exist_ok=True)
        write(os.path.join(d, "k.cu"), '#include "a.h"\nextern "C" __global__ void '
              "k(const char **o) { o[0] = where_a(); o[1] = where_b(); }\n")
    for place, inc in (("p1", "inc"), ("p1", "./inc"), ("p1", "inc/"), ("p2", "inc"),
                       ("p2", None), ("p1", None), ("p1", "inc")):
        d = os.path.join(root, place)
        inc = inc or os.path.join(d, "inc")
        out = os.path.join(root, "h.ptx")
        p = subprocess.run([base.KCACHE, "compile", "k.cu", "--arch", "sm_90", "--ptx", "-o", out,
                            "--", "-I" + inc], cwd=d, env=c.env, capture_output=True, timeout=120)
        check(p.returncode == 0, "%s -I %s: %s" % (place, inc, p.stderr.decode()))
        with open(out) as f:
            got = f.read()
        want = nvrtc.ptx(os.path.join(d, "k.cu"), ["-I" + inc], cwd=d)
        check(code(got) == code(want), "%s -I %s: kcache's __FILE__ is not NVRTC's" % (place, inc))
        log = p.stderr.decode() + p.stdout.decode()
        b = inc + ("" if inc.endswith("/") else "/") + "sub/../b.h(2): warning"
        check(b in log, "%s -I %s: the warning does not name %s" % (place, inc, b))


def test_time_macros(root, nvrtc):
    """__DATE__ and __TIME__ expand to the moment of the compile, which no key holds:
    named in the source, in a header's #define or in a -D value, the compile is never
    served from the cache (a hit gave the first compile's seconds)."""
    t = Case(root, nvrtc)
    d = os.path.join(root, "tm")
    write(os.path.join(d, "h.cuh"), "#pragma once\n#define STAMP (__TIME__[7] - '0')\n")
    cases = (("code.cu", KERNEL % "__TIME__[7] - '0'", ()),
             ("hdr.cu", '#include "h.cuh"\n' + KERNEL % "STAMP", ()),
             ("dv.cu", KERNEL % "STAMPD", ("-DSTAMPD=(__DATE__[5] - '0')",)))
    for name, text, opts in cases:
        write(os.path.join(d, name), text)
        for attempt in ("first", "second"):
            _, report = t.kcache(os.path.join(d, name), *opts)
            check('"outcome": "uncached"' in report and "moment of its compile" in report,
                  "%s, %s compile: not compiled uncached: %s" % (name, attempt, report))


def test_header_path_that_no_line_directive_spells(root, nvrtc):
    """A directory named with a quote or "??": NVRTC's __FILE__ still (compiled from disk)."""
    c = Cache(root, "one")
    for dirname in ('q"x', "w??x", "b\\s"):
        d = os.path.join(root, "t" + str(len(dirname)) + dirname[1])
        write(os.path.join(d, dirname, "h.h"), "__device__ const char *hf() { return __FILE__; }\n")
        write(os.path.join(d, "k.cu"), '#include "h.h"\nextern "C" __global__ void '
              "k(const char **o) { o[0] = hf(); }\n")
        out = os.path.join(root, "u.ptx")
        p = subprocess.run([base.KCACHE, "compile", "k.cu", "--arch", "sm_90", "--ptx", "-o", out,
                            "--", "-I" + dirname], cwd=d, env=c.env, capture_output=True,
                           timeout=120)
        check(p.returncode == 0, "-I %s: %s" % (dirname, p.stderr.decode()))
        with open(out) as f:
            got = f.read()
        want = nvrtc.ptx(os.path.join(d, "k.cu"), ["-I" + dirname], cwd=d)
        check(code(got) == code(want), "-I %s: kcache's __FILE__ is not NVRTC's" % dirname)


def main():
    if not os.path.exists(os.path.join(TOOLKIT, "lib64", "libnvrtc.so")):
        print("skipped: no CUDA toolkit at %s" % TOOLKIT)
        return 77
    nvrtc = PlainNvrtc()
    failed = []
    for name, fn in sorted(globals().items()):
        if not name.startswith("test_") or (base.ONLY and name not in base.ONLY):
            continue
        root = tempfile.mkdtemp(prefix="kcache-stale-")
        try:
            fn(root, nvrtc)
            print("ok   %s" % name)
        except Exception as ex:
            failed.append(name)
            print("FAIL %s: %s" % (name, ex))
        finally:
            shutil.rmtree(root, ignore_errors=True)
    print("%d failed" % len(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The program's name is keyed only where it can change NVIDIA's bytes or log.

test_progname.py NVRTC_ONE [CASE...]   (CASE: cupy-like, cupy-nan, or a key of SENSITIVE)

CuPy names every program `<a new temporary directory>/kern.cu`: a second
process compiling the same source under a name in another fresh directory
must hit. Where the name does reach the bytes or the log (__FILE__ and its
kin in the program or through a header's macro, #line, line information,
assert, source_location, a warning in the log, LTO-IR, an anonymous
namespace (its members are named after the base name), a "quoted" include
found beside the name, a ## in a header's own code or one that a toolkit
macro hands a piece), another name must get NVIDIA's answer for that
name, never the first name's: every run under the drop-in is compared with
NVIDIA's library alone, for the name it was given. An anonymous namespace's
kernel hits under a name with the same base name in another directory.
A log whose diagnostics start with the name, and show it nowhere else, is
kept as a template: another directory hits and gets NVIDIA's log for its
own name; a log that shows the name otherwise misses (TEMPLATES).
"""
import os
import sys
import tempfile

from shim_report import read_report  # beside this script

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pyhelp"))
import kctest  # noqa: E402

ONE = os.path.abspath(sys.argv[1])
ONLY = set(sys.argv[2:])
KCACHE = os.environ["KCACHE_EXE"]
REAL = os.environ["NVRTC_REAL"]
TOOLKIT = os.path.dirname(os.path.dirname(os.path.realpath(REAL)))
CCCL = os.path.join(TOOLKIT, "include", "cccl")
SONAME = os.path.basename(REAL)

check = kctest.Tally()


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


class Run:
    def __init__(self, tmp):
        self.tmp = tmp
        self.env = kctest.dropin_env(tmp, lambda d: os.path.exists(os.path.join(d or ".", SONAME)))
        self.n = 0

    def one(self, src, name, argv, shim):
        """nvrtc_one's output (rc, log, artifact) for SOURCE handed over as NAME, and the
        drop-in's report (hits, misses) when shim."""
        self.n += 1
        out = os.path.join(self.tmp, "out-%d" % self.n)
        rep = os.path.join(self.tmp, "report")
        wrap = [KCACHE, "run", "--"] if shim else []
        env = dict(self.env, KCACHE_NVRTC_REPORT=rep) if shim else self.env
        rc = kctest.run_logged(wrap + [ONE, out, src, name, "--"] + argv, env, self.tmp)
        got = kctest.read_bytes(out) if rc == 0 and os.path.exists(out) else b"exit %d" % rc
        rows = read_report(rep) if shim else []
        return got, (rows[-1] if rows else {})


def fresh_name(tmp, prefix="tmp", base="kern.cu"):
    """A name in a new temporary directory, as CuPy makes one per compile."""
    return os.path.join(tempfile.mkdtemp(dir=tmp, prefix=prefix), base)


# CuPy's max/min preamble names NAN, which CCCL defines through _CUDA_VSTD, a namespace
# that _LIBCUDACXX_CONCAT pastes of pieces that cannot spell __FILE__: reduced.
NAN_HEADER = """#pragma once
#define KC_CONCAT1(X, Y) X##Y
#define KC_CONCAT(X, Y) KC_CONCAT1(X, Y)
#define KC_ABI_VERSION 4
#define KC_ABI_NAMESPACE KC_CONCAT(__, KC_ABI_VERSION)
#define KC_VSTD ::kc::KC_ABI_NAMESPACE
namespace kc { namespace KC_ABI_NAMESPACE {
__device__ inline float quiet_nan() { return __int_as_float(0x7fffffff); } } }
#define NAN KC_VSTD::quiet_nan()
"""
NAN_SOURCE = """#include "cupy/cmath.cuh"
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif
extern "C" __global__ void k(float *v) { v[threadIdx.x] = v[0] != v[0] ? NAN : v[1]; }
"""


def cupy_like(run, tmp):
    inc = os.path.join(tmp, "cupy-include")
    write(os.path.join(inc, "cupy", "carray.cuh"), "#pragma once\ntemplate <class T> "
          "__device__ T twice(T x) { return x + x; }\n")
    write(os.path.join(inc, "cupy", "cmath.cuh"), NAN_HEADER)
    plain = os.path.join(tmp, "cupy-src.cu")
    write(plain, '#include "cupy/carray.cuh"\nextern "C" __global__ void k(float *v) '
          "{ v[threadIdx.x] = twice(v[threadIdx.x]); }\n")
    nan = os.path.join(tmp, "cupy-nan.cu")
    write(nan, NAN_SOURCE)
    for case, src in (("cupy-like", plain), ("cupy-nan", nan)):
        if not ONLY or case in ONLY:
            cupy_like_source(run, tmp, inc, case, src)


def cupy_like_source(run, tmp, inc, case, src):
    for arch in ("-arch=sm_90", "-arch=compute_90"):
        argv = [arch, "-I" + inc, "-std=c++17"]
        first = fresh_name(tmp)
        ref1, _ = run.one(src, first, argv, False)
        got1, r1 = run.one(src, first, argv, True)
        second = fresh_name(tmp)
        ref2, _ = run.one(src, second, argv, False)
        got2, r2 = run.one(src, second, argv, True)
        check(ref1.startswith(b"rc 0") and got1 == ref1 and r1.get("misses") == 1,
              f"{case} {arch}: first process, a miss with NVIDIA's bytes ({r1})")
        check(got2 == ref2, f"{case} {arch}: second process, NVIDIA's bytes")
        check(r2.get("hits") == 1 and not r2.get("misses"),
              f"{case} {arch}: a name in another fresh directory hits ({r2})")


KERNEL = 'extern "C" __global__ void k(char *v) { %s }\n'
COPY = "const char *f = %s; v[threadIdx.x] = f[threadIdx.x];"
LENGTH = "v[0] = sizeof(%s);"

# name: (source, files beside the first name only {rel: text}, options)
SENSITIVE = {
    "file-macro": (KERNEL % (COPY % "__FILE__"), {}, []),
    "base-file": (KERNEL % (COPY % "__BASE_FILE__"), {}, []),
    "builtin-file": (KERNEL % (COPY % "__builtin_FILE()"), {}, []),
    "file-length": (KERNEL % "v[0] = sizeof(__FILE__);", {}, []),
    "header-macro": ('#include "where.h"\n' + KERNEL % (COPY % "WHERE"),
                     {}, ["-I{inc}"]),
    "line-directive": ("#line 40\n" + KERNEL % (COPY % "__FILE__"), {}, []),
    "assert": (KERNEL % "assert(v[0]);", {}, []),
    "source-location": ("#include <cuda/std/source_location>\n" + KERNEL %
                        "auto l = cuda::std::source_location::current(); "
                        "v[threadIdx.x] = l.file_name()[threadIdx.x];", {}, ["-I" + CCCL]),
    "cccl-assert": ("#define CCCL_ENABLE_ASSERTIONS\n#include <cuda/std/cassert>\n" + KERNEL %
                    '_CCCL_ASSERT(v[0], "m");', {}, ["-I" + CCCL]),
    "lineinfo": (KERNEL % "v[0] = 1;", {}, ["-lineinfo"]),
    "device-debug": (KERNEL % "v[0] = 1;", {}, ["-G"]),
    "warning": (KERNEL % "int unused;", {}, []),
    "ltoir": (KERNEL % "v[0] = 1;", {}, ["-dlto"]),
    "anonymous-namespace": ("namespace { __device__ char kc_anon = 11; }\n" +
                            KERNEL % "v[0] = kc_anon + v[1];", {}, []),
    # ## whose pieces can spell __FILE__ or its kin: through parameters, other
    # macros, -D values, a macro's name that expands __FILE__; only its length in
    # the bytes, which the check after the compile cannot see.
    "paste-params": ('#include "paste.h"\n' + KERNEL % (LENGTH % "KC_CAT(__FI, LE__)"),
                     {}, ["-I{inc}"]),
    "paste-macros": ('#include "paste.h"\n' + KERNEL % (LENGTH % "KC_XCAT(KC_HEAD, KC_TAIL)"),
                     {}, ["-I{inc}"]),
    "paste-defines": ('#include "paste.h"\n' + KERNEL % (LENGTH % "KC_XCAT(KC_DHEAD, KC_DTAIL)"),
                      {}, ["-I{inc}", "-DKC_DHEAD=__BASE_FI", "-DKC_DTAIL=LE__"]),
    "paste-macro-name": ('#include "paste.h"\n' + KERNEL % (LENGTH % "KC_CAT(KC_WH, ERE)"),
                         {}, ["-I{inc}"]),
    "paste-in-header": ('#include "paste.h"\n' + KERNEL % (LENGTH % "KC_PASTED_WHERE"),
                        {}, ["-I{inc}"]),
    # %:%: is ## (a digraph), in the program's own #define and in a -D value.
    "paste-digraph": ("#define KC_DCAT(a, b) a %:%: b\n#define KC_DXCAT(a, b) KC_DCAT(a, b)\n" +
                      KERNEL % (LENGTH % "KC_DXCAT(__FI, LE__)"), {}, []),
    "paste-digraph-define": (KERNEL % (LENGTH % "KC_DXCAT(__FI, LE__)"), {},
                             ["-DKC_DCAT(a,b)=a%:%:b", "-DKC_DXCAT(a,b)=KC_DCAT(a,b)"]),
    # A toolkit macro that pastes: only the user headers' macros are read.
    "toolkit-paste": ("#include <cuda/std/__cccl/preprocessor.h>\n" +
                      KERNEL % (LENGTH % "_CCCL_PP_CAT(__FI, LE__)"), {}, ["-I" + CCCL]),
    # A comment before a #define's name or its #, and a macro's name past 255 bytes.
    "comment-before-define": ('#include "hidden.h"\n' + KERNEL % (LENGTH % "KC_HID1"),
                              {}, ["-I{inc}"]),
    "comment-inside-define": ('#include "hidden.h"\n' + KERNEL % (LENGTH % "KC_HID2"),
                              {}, ["-I{inc}"]),
    "long-macro-name": ('#include "long.h"\n' + KERNEL % "v[0] = kc_long;", {}, ["-I{inc}"]),
    # A comment that spans lines inside a #define: the body goes on after it.
    "comment-in-define": ('#include "paste.h"\n' + KERNEL % (LENGTH % "KC_CWHERE"),
                          {}, ["-I{inc}"]),
    "comment-in-paste": ('#include "paste.h"\n' + KERNEL % (LENGTH % "KC_CPASTED"),
                         {}, ["-I{inc}"]),
    # A user header's own code pastes __BASE_FILE__ (the program's name wherever it is
    # expanded): the program only reads what the header made of it.
    "header-paste-base-file": ('#include "hpaste.h"\n' + KERNEL % "v[0] = kc_len;",
                               {}, ["-I{inc}"]),
    # ... and through a toolkit macro that pastes (CCCL's _CCCL_PP_CAT).
    "header-toolkit-paste": ('#include "htkpaste.h"\n' + KERNEL % "v[0] = kc_tklen;",
                             {}, ["-I{inc}", "-I" + CCCL]),
    # A piece only a toolkit macro's body supplies: libcu++'s _LIBCUDACXX_ABI_NAMESPACE
    # is __4 (pasted of __ and the ABI version), which completes a user macro's name.
    "toolkit-piece": ("#include <cuda/std/cstddef>\n" + '#include "paste.h"\n' +
                      KERNEL % (LENGTH % "KC_XCAT(KC_AT, _LIBCUDACXX_ABI_NAMESPACE)"),
                      {}, ["-I{inc}", "-I" + CCCL]),
    "beside-name": ('#include "val.h"\n' + KERNEL % "v[0] = VAL;",
                    {"val.h": "#define VAL 7\n"}, ["-I{inc}"]),
}


PASTE_HEADER = """#define KC_CAT(a, b) a##b
#define KC_XCAT(a, b) KC_CAT(a, b)
#define KC_HEAD __FI
#define KC_TAIL LE__
#define KC_WHERE __FILE__
#define KC_PASTED_WHERE KC_XCAT(__BASE_, KC_XCAT(FI, LE__))
#define KC_CWHERE /* a comment
  that ends here */ __FILE__
#define KC_CPASTED KC_XCAT(__FI, /* "a comment
  */ LE__)
#define KC_AT__4 __BASE_FILE__
"""

HPASTE_HEADER = """#define KC_CAT(a, b) a##b
#define KC_XCAT(a, b) KC_CAT(a, b)
static const int kc_len = sizeof(KC_XCAT(__BASE_, KC_XCAT(FI, LE__)));
"""

HTKPASTE_HEADER = """#include <cuda/std/__cccl/preprocessor.h>
static const int kc_tklen = sizeof(_CCCL_PP_CAT(__BASE_, FILE__));
"""

HIDDEN_HEADER = """/* a comment */ #define KC_HID1 __FILE__
#/* a comment */define KC_HID2 __FILE__
"""
LONG_HEADER = """#define KC_%s __BASE_FILE__
__device__ const char kc_long = sizeof(KC_%s);
""" % ("L" * 300, "L" * 300)


def sensitive(run, tmp):
    inc = os.path.join(tmp, "sens-include")
    write(os.path.join(inc, "where.h"), "#define WHERE __FILE__\n")
    write(os.path.join(inc, "val.h"), "#define VAL 3\n")
    write(os.path.join(inc, "paste.h"), PASTE_HEADER)
    write(os.path.join(inc, "hidden.h"), HIDDEN_HEADER)
    write(os.path.join(inc, "long.h"), LONG_HEADER)
    write(os.path.join(inc, "hpaste.h"), HPASTE_HEADER)
    write(os.path.join(inc, "htkpaste.h"), HTKPASTE_HEADER)
    for case, (text, beside, opts) in SENSITIVE.items():
        if ONLY and case not in ONLY:
            continue
        src = os.path.join(tmp, case + ".cu")
        write(src, text)
        for arch in ("-arch=sm_90", "-arch=compute_90"):
            argv = [arch] + [o.format(inc=inc) for o in opts]
            first = fresh_name(tmp)
            for rel, body in beside.items():
                write(os.path.join(os.path.dirname(first), rel), body)
            ref1, _ = run.one(src, first, argv, False)
            got1, r1 = run.one(src, first, argv, True)
            again, r2 = run.one(src, first, argv, True)
            # Another directory (its length too, for sizeof(__FILE__)), then another
            # base name: each gets NVIDIA's answer for it, never the first name's.
            for other in (fresh_name(tmp, "tmp-longer"), fresh_name(tmp, base="other-k.cu")):
                ref2, _ = run.one(src, other, argv, False)
                got2, r3 = run.one(src, other, argv, True)
                shows = ref1 != ref2
                if (os.path.basename(other) == "kern.cu") != (case == "anonymous-namespace"):
                    check(ref1.startswith(b"rc 0") and shows,
                          f"{case} {arch}: NVIDIA's answer depends on {other} (else "
                          f"the case shows nothing: {ref1[:120]!r})")
                stale = "the first name's (a false hit)" if got2 == ref1 and shows else "another"
                check(got2 == ref2, f"{case} {arch}: {other} gets NVIDIA's answer for it, "
                      f"not {stale} ({r3})")
                if case == "anonymous-namespace" and not shows:
                    # Only the last component shows (CCCL's CUB kernels, under CuPy's names).
                    check(r3.get("hits") == 1 and not r3.get("misses"),
                          f"{case} {arch}: the same last component in another directory "
                          f"hits ({r3})")
            check(got1 == ref1 and again == ref1 and r2.get("hits") == 1,
                  f"{case} {arch}: the first name, NVIDIA's answer, then a hit ({r1}, {r2})")


TW = "template <class T> __device__ T kc_tw(T t) { return t << 40; }"
# name: (source, options, a header beside each name, whether another directory hits)
TEMPLATES = {
    "template-unused": (KERNEL % "int kc_unused; v[0] = 1;", [], None, True),
    "template-directive": ("#warning the program warns\n" + KERNEL % "v[0] = 2;", [], None, True),
    "template-header": ('#include "warns.h"\n' + KERNEL % "int kc_u; v[0] = kc_twice(3);",
                        ["-I{inc}"], None, True),
    # Line information holds the name: keyed with it, warning or not.
    "template-lineinfo": (KERNEL % "int kc_li; v[0] = 3;", ["-lineinfo"], None, False),
    "template-quoted": ("#warning kern.cu is named here\n" + KERNEL % "v[0] = 4;", [], None,
                        False),
    # "detected during instantiation of ... at line 2": in the program, no name...
    "template-instantiated": (TW + "\n" + KERNEL % "v[0] = kc_tw(1);", [], None, True),
    # ... from a header, "at line 2 of NAME": the name past the prefix.
    "template-instantiated-header": ('#include "tw.h"\n' + KERNEL % "v[0] = kc_tw(2);",
                                     ["-I{inc}"], None, False),
    "template-header-named": ('#include "kern.cu.h"\n' + KERNEL % "v[0] = 5;", ["-I{inc}"], None,
                              False),
    "template-header-beside": ('#include "beside.h"\n' + KERNEL % "v[0] = 6;", [],
                               "#warning beside the name\n", False),
    # A name so short that other words of the log hold it.
    "template-short": (KERNEL % "int kc_short; v[0] = 7;", [], None, False),
}
WARNS_HEADER = """#pragma once
#warning a user header warns
__device__ inline int kc_twice(int x) { int kc_h; return 2 * x; }
"""


def templates(run, tmp):
    inc = os.path.join(tmp, "tmpl-include")
    write(os.path.join(inc, "warns.h"), WARNS_HEADER)
    write(os.path.join(inc, "kern.cu.h"), "#warning its path holds the name's last component\n")
    write(os.path.join(inc, "tw.h"), TW + "\n")
    for case, (text, opts, beside, hits) in TEMPLATES.items():
        if ONLY and case not in ONLY:
            continue
        src = os.path.join(tmp, case + ".cu")
        write(src, text)
        argv = ["-arch=sm_90"] + [o.format(inc=inc) for o in opts]
        if case == "template-short":
            first, second = "a", "b"
        else:
            first, second = fresh_name(tmp), fresh_name(tmp)
        for name in (first, second):
            if beside:
                write(os.path.join(os.path.dirname(name), "beside.h"), beside)
        ref1, _ = run.one(src, first, argv, False)
        got1, r1 = run.one(src, first, argv, True)
        ref2, _ = run.one(src, second, argv, False)
        got2, r2 = run.one(src, second, argv, True)
        check(ref1.startswith(b"rc 0") and b"warning" in ref1,
              f"{case}: NVIDIA's log warns ({ref1[:120]!r})")
        check(got1 == ref1 and r1.get("misses") == 1,
              f"{case}: first process, a miss with NVIDIA's log and bytes ({r1})")
        check(got2 == ref2, f"{case}: {second} gets NVIDIA's log and bytes for its name ({r2})")
        got = "hit" if r2.get("hits") == 1 and not r2.get("misses") else "miss"
        check(got == ("hit" if hits else "miss"), f"{case}: another name, a {got} ({r2})")


def main():
    with tempfile.TemporaryDirectory(prefix="kcache progname ") as tmp:
        run = Run(tmp)
        cupy_like(run, tmp)
        sensitive(run, tmp)
        templates(run, tmp)
    return check.status()


if __name__ == "__main__":
    sys.exit(main())

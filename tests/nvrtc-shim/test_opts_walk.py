#!/usr/bin/env python3
"""The option walk: every option NVRTC lists (nvrtc.h, NVRTC 13), in every
spelling (two dashes and one, the long and the short name, "=value" and the
value as the next argument, glued for -D/-U/-I, the option twice with two
values in both orders, several -arch), compiled by NVIDIA's NVRTC alone, by
libkcache's compile API as `kcache compile -- OPTIONS` hands it the options
(a miss, then a hit) and by the drop-in (a miss, then a hit); and, for the
options of issue 32's rejected spellings, by `kcache compile` itself. Every way must
give NVRTC's verdict (accepted or rejected) and, when accepted, its output
kind and bytes. A disagreement fails and names the option and spelling.

test_opts_walk.py NVRTC_WALK NVRTC_WALK_LIB
"""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pyhelp"))
import kctest  # noqa: E402

WALK, WALK_LIB = (os.path.abspath(a) for a in sys.argv[1:3])
KCACHE = os.environ["KCACHE_EXE"]
REAL = os.environ["NVRTC_REAL"]
SONAME = os.path.basename(REAL)

# (long name, short name, None for a flag or two values NVRTC takes), as nvrtc.h lists them.
OPTIONS = [
    ("gpu-architecture", "arch", ["sm_90", "compute_90"]),
    ("device-c", "dc", None), ("device-w", "dw", None),
    ("relocatable-device-code", "rdc", ["true", "false"]),
    ("extensible-whole-program", "ewp", None),
    ("device-debug", "G", None), ("generate-line-info", "lineinfo", None),
    ("dopt", "dopt", ["on", "off"]), ("Ofast-compile", "Ofc", ["max", "0"]),
    ("ptxas-options", "Xptxas", ["-O1", "-O2"]), ("maxrregcount", "maxrregcount", ["32", "64"]),
    ("ftz", "ftz", ["true", "false"]), ("prec-sqrt", "prec-sqrt", ["false", "true"]),
    ("prec-div", "prec-div", ["false", "true"]), ("fmad", "fmad", ["false", "true"]),
    ("use_fast_math", "use_fast_math", None),
    ("extra-device-vectorization", "extra-device-vectorization", None),
    ("modify-stack-limit", "modify-stack-limit", ["false", "true"]),
    ("dlink-time-opt", "dlto", None), ("gen-opt-lto", "gen-opt-lto", None),
    ("optix-ir", "optix-ir", None),
    ("jump-table-density", "jtd", ["0", "101"]),
    ("device-stack-protector", "device-stack-protector", ["true", "false"]),
    ("no-cache", "no-cache", None), ("frandom-seed", "frandom-seed", ["5", "7"]),
    ("define-macro", "D", ["X=1", "X=2"]), ("undefine-macro", "U", ["X", "Y"]),
    ("include-path", "I", ["inc", "inc2"]), ("pre-include", "include", ["pre1.h", "pre2.h"]),
    ("no-source-include", "no-source-include", None),
    ("std", "std", ["c++17", "c++20"]),
    ("builtin-move-forward", "builtin-move-forward", ["false", "true"]),
    ("builtin-initializer-list", "builtin-initializer-list", ["false", "true"]),
    ("pch", "pch", None), ("create-pch", "create-pch", ["a.pch", "b.pch"]),
    ("use-pch", "use-pch", ["a.pch", "b.pch"]), ("pch-dir", "pch-dir", ["pchd", "pchd2"]),
    ("pch-verbose", "pch-verbose", ["true", "false"]),
    ("pch-messages", "pch-messages", ["true", "false"]),
    ("instantiate-templates-in-pch", "instantiate-templates-in-pch", ["true", "false"]),
    ("disable-warnings", "w", None), ("restrict", "restrict", None),
    ("device-as-default-execution-space", "default-device", None),
    ("device-int128", "device-int128", None), ("device-float128", "device-float128", None),
    ("optimization-info", "opt-info", ["inline", "inline"]),
    ("display-error-number", "err-no", None), ("no-display-error-number", "no-err-no", None),
    ("diag-error", "diag-error", ["177", "550"]), ("diag-suppress", "diag-suppress", ["177", "550"]),
    ("diag-warn", "diag-warn", ["177", "550"]), ("brief-diagnostics", "brief-diag", ["true", "false"]),
    ("time", "time", ["t1.csv", "t2.csv"]), ("split-compile", "split-compile", ["0", "1"]),
    ("fdevice-syntax-only", "fdevice-syntax-only", None), ("minimal", "minimal", None),
    ("fdevice-time-trace", "fdevice-time-trace", ["tt1.json", "tt2.json"]),
]
ARCH = ["-arch=sm_90"]
# PTX is quicker to make than a CUBIN: options that act past PTX get a CUBIN.
PTX = ["-arch=compute_90"]
CUBIN_OPTIONS = {"device-debug", "generate-line-info", "dopt", "Ofast-compile", "ptxas-options",
                 "maxrregcount", "split-compile", "dlink-time-opt", "device-stack-protector",
                 "relocatable-device-code", "device-c", "device-w", "extensible-whole-program",
                 "fdevice-time-trace", "optix-ir", "device-float128"}


def spellings(lng, short, values):
    """(label, options) for every way to write the option."""
    names = [("--" + lng, "--long"), ("-" + lng, "-long")]
    if short != lng:
        names += [("-" + short, "-short"), ("--" + short, "--short")]
    out = []
    for name, tag in names:
        if values is None:
            out += [(tag, [name]), (tag + "=1", [name + "=1"])]
            continue
        v1, v2 = values
        out += [(tag + "=v", [name + "=" + v1]), (tag + " v", [name, v1]),
                (tag + " twice", [name + "=" + v1, name + "=" + v2]),
                (tag + " twice reversed", [name + "=" + v2, name + "=" + v1]),
                (tag + " v (last)", [name])]
        if len(short) == 1 and tag == "-short":
            out += [(tag + "v", [name + v1]), (tag + " =v", [name + "=" + v1]),
                    (tag + " glued space", [name + " " + v1])]
    return out


def cases():
    """(option, label, options) in walk order."""
    out = []
    for lng, short, values in OPTIONS:
        for label, opts in spellings(lng, short, values):
            if lng == "gpu-architecture":
                out.append((lng, label, opts))
            else:
                out.append((lng, label, (ARCH if lng in CUBIN_OPTIONS else PTX) + opts))
    # Several -arch: NVRTC makes a CUBIN if any is real, for the last one's number.
    archs = [["sm_90", "compute_90"], ["compute_90", "sm_90"], ["sm_90", "sm_80"],
             ["compute_80", "compute_90"], ["sm_90", "compute_80"], ["sm_90", "sm_90"],
             ["sm_90", "sm_90a"], ["sm_90a", "sm_90"], ["sm_100f", "sm_90"]]
    for a in archs:
        out.append(("gpu-architecture", " ".join(a), ["-arch=" + v for v in a]))
        out.append(("gpu-architecture", " ".join(a) + " -dlto", ["-arch=" + v for v in a] +
                    ["-dlto"]))
    for v in ["SM_90", "sm90", "compute90", "native", "lto_90", "sm_90 ", ""]:
        out.append(("gpu-architecture", "-arch=%r" % v, ["-arch=" + v]))
    # Empty values: NVRTC takes some and rejects others.
    for opts in (["-I="], ["-I", ""], ["--include-path="], ["-D="], ["--define-macro="],
                 ["--std="], ["-Xptxas", ""], ["-U", ""]):
        out.append((opts[0].strip("-=") or "?", "empty value %r" % opts, ARCH + opts))
    # Values longer than any buffer: a -D of 5 KiB and of 1 MiB, a -include of 4 KiB.
    for size in (5000, 1 << 20):
        out.append(("define-macro", "-D of %d bytes" % size,
                    ARCH + ["-DX=(1" + "+0" * (size // 2) + ")"]))
    out.append(("pre-include", "-include of 4 KiB", ARCH + ["-include", "./" * 2100 + "pre1.h"]))
    return out


def workdir(root, name):
    d = os.path.join(root, name)
    for sub in ("inc", "inc2", "pchd"):
        os.makedirs(os.path.join(d, sub))
    for f, text in (("pre1.h", "#define P 1\n"), ("pre2.h", "#define P 2\n")):
        with open(os.path.join(d, f), "w") as fh:
            fh.write(text)
    return d


def run(argv, env, cwd, out):
    p = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    if p.returncode != 0:
        print(" ".join(argv[:4]), "->", p.returncode, p.stderr[-2000:])
        return None
    with open(out) as f:
        return f.read().splitlines()


# Walked through `kcache compile` too (a process a compile: these only).
CLI_OPTIONS = {"generate-line-info", "device-debug", "include-path", "std", "frandom-seed",
               "define-macro"}


def fnv(data):
    h = 1469598103934665603
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def cli_walk(tmp, env, work, all_cases, ref):
    """`kcache compile --arch A k.cu -o OUT -- OPTIONS`, twice (a miss, then a hit),
    for the cases of CLI_OPTIONS: NVRTC's verdict and bytes. Returns the disagreements."""
    shutil.rmtree(work, ignore_errors=True)
    workdir(tmp, "work")
    with open(os.path.join(work, "k.cu"), "w") as f:
        f.write(subprocess.run([WALK, "--source"], capture_output=True, text=True,
                               check=True).stdout)
    cenv = dict(env, KCACHE_DIR=os.path.join(tmp, "cli-cache"))
    disagree = walked = 0
    for k, (option, label, opts) in enumerate(all_cases):
        if option not in CLI_OPTIONS or not opts[0].startswith("-arch=") or \
                any(o.startswith("-arch") for o in opts[1:]) or len(" ".join(opts)) > 4000:
            continue
        walked += 1
        want = ref[k].split()
        for round in ("miss", "hit"):
            out = os.path.join(tmp, "cli.out")
            if os.path.exists(out):
                os.unlink(out)
            p = subprocess.run([KCACHE, "compile", "--arch", opts[0][6:], "k.cu", "-o", out,
                                "--"] + opts[1:], env=cenv, cwd=work, capture_output=True)
            mine = ["1"]
            if p.returncode == 0:
                data = kctest.read_bytes(out)
                kind = "ptx" if opts[0].startswith("-arch=compute_") else "cubin"
                if kind == "ptx":
                    data = data.split(b"\0")[0]
                mine = ["0", kind, str(len(data)), fnv(data)]
            ok = want[0] == "0"
            # Line information holds the program's name: the CLI names it by the
            # file's path, nvrtc_walk "k.cu" in memory. The verdict is compared.
            bytes_too = option not in ("device-debug", "generate-line-info")
            if (mine[0] == "0") != ok or (ok and bytes_too and mine[1:] != want[1:]):
                disagree += 1
                print("DISAGREE %s [%s] %r via kcache compile %s: NVRTC %s, kcache %s (%s)" %
                      (option, label, opts[:4], round, " ".join(want), " ".join(mine),
                       p.stderr.decode(errors="replace").strip()[-300:]))
    print("kcache compile: %d cases of %s, twice each" % (walked, ", ".join(sorted(CLI_OPTIONS))))
    return disagree


def main():
    if not os.path.exists(REAL):
        print("SKIP: no NVRTC at", REAL)
        return 77
    tmp = tempfile.mkdtemp(prefix="kcache-opts-walk-")
    try:
        return walk(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def walk(tmp):
    all_cases = cases()
    listing = os.path.join(tmp, "cases")
    with open(listing, "w") as f:
        for _, _, opts in all_cases:
            f.write("\t".join(opts) + "\n")
    env = kctest.dropin_env(tmp, lambda d: os.path.exists(os.path.join(d, SONAME)))
    # What NVIDIA's NVRTC leaves allocated after a rejected option is not kcache's leak.
    supp = os.path.join(tmp, "lsan.supp")
    with open(supp, "w") as f:
        f.write("leak:pthread_setspecific\nleak:libnvrtc.so\nleak:_dl_exception_create\n"
                "leak:_dlerror_run\n")
    env["LSAN_OPTIONS"] = "use_tls=0:suppressions=" + supp
    passes = [("nvrtc", [WALK]), ("library miss", [WALK_LIB]), ("library hit", [WALK_LIB]),
              ("drop-in miss", [KCACHE, "run", "--", WALK]),
              ("drop-in hit", [KCACHE, "run", "--", WALK])]
    got = {}
    # One working directory for every pass, by one path: NVRTC writes it into
    # line information and LTO-IR.
    work = os.path.join(tmp, "work")
    for i, (name, argv) in enumerate(passes):
        shutil.rmtree(work, ignore_errors=True)
        workdir(tmp, "work")
        out = os.path.join(tmp, "out%d" % i)
        got[name] = run(argv + [listing, out], env, work, out)
    for name, _ in passes:
        if got.get(name) is None or len(got[name]) != len(all_cases):
            print("FAIL: the %s pass did not answer every case" % name)
            return 1
    disagree = cli_walk(tmp, env, work, all_cases, got["nvrtc"])
    accepted = 0
    for k, (option, label, opts) in enumerate(all_cases):
        ref = got["nvrtc"][k].split()
        ok = ref[0] == "0"
        accepted += ok
        for name, _ in passes[1:]:
            if option == "optix-ir" and name.startswith("library"):
                continue  # no kind of kcache's: the library says so, the drop-in leaves it to NVRTC
            mine = got[name][k].split()
            same = (mine[0] == "0") == ok and (not ok or mine[1:] == ref[1:])
            if not same:
                disagree += 1
                print("DISAGREE %s [%s] %r via %s: NVRTC %s, kcache %s" %
                      (option, label, opts[:4], name, " ".join(ref), " ".join(mine)))
    print("walked %d options, %d spellings (%d accepted by NVRTC, %d rejected) through %d "
          "ways: %d disagreements" % (len(OPTIONS), len(all_cases), accepted,
                                       len(all_cases) - accepted, len(passes) - 1, disagree))
    return 1 if disagree else 0


if __name__ == "__main__":
    sys.exit(main())

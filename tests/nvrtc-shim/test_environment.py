#!/usr/bin/env python3
"""The environment NVRTC reads: never a kernel made under another value.

test_environment.py NVRTC_ONE GETENV_RECORDER

Which variables NVIDIA's NVRTC reads is observed here, not listed: NVRTC_ONE
runs with GETENV_RECORDER preloaded, which notes every name NVRTC's library
asks getenv for, while it loads and compiles a CUBIN, PTX and LTO-IR. Then
each name is set, in turn, to a value that plausibly matters
(LLVM_OVERRIDE_PRODUCER is written into LTO-IR), and `kcache compile` and the
drop-in (`kcache run`) must give NVIDIA's answer for that environment, in
one cache shared by every name: first without the variable (a miss, stored),
then with it (a kernel made without it would be a stale hit), then without
it again (nor one made with it). Uncached is allowed; another kernel is not.
"""
import os
import subprocess
import sys
import tempfile

from shim_report import read_report  # beside this script

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pyhelp"))
import kctest  # noqa: E402

ONE, RECORDER = (os.path.abspath(a) for a in sys.argv[1:3])
KCACHE = os.environ["KCACHE_EXE"]
REAL = os.environ["NVRTC_REAL"]
SONAME = os.path.basename(REAL)
KERNEL = 'extern "C" __global__ void k(int *v) { v[threadIdx.x] = 3; }\n'
KINDS = {"ltoir": ["-arch=sm_90", "-dlto"], "cubin": ["-arch=sm_90"], "ptx": ["-arch=compute_90"]}
CLI_KIND = {"ltoir": ["--ltoir"], "cubin": [], "ptx": ["--ptx"]}

check = kctest.Tally()


def has_nvrtc(d):
    return os.path.exists(os.path.join(d or ".", SONAME))


def observe(tmp, env, work):
    """{name: kinds} of every variable NVRTC asked getenv for."""
    seen = {}
    for kind, opts in KINDS.items():
        log = os.path.join(tmp, "getenv-" + kind)
        e = dict(env, LD_PRELOAD=RECORDER, KC_GETENV_LOG=log)
        rc = kctest.run_logged([ONE, os.path.join(tmp, "observe-out"), "k.cu", "k.cu", "--"]
                               + opts, e, work)
        check(rc == 0, f"NVRTC compiles the {kind} with the recorder preloaded")
        with open(log) as f:
            for name in f.read().split():
                seen.setdefault(name, set()).add(kind)
    return seen


def value_for(name, tmp):
    if name == "LLVM_OVERRIDE_PRODUCER":
        return "kcache-test-producer-17"
    if name == "PWD":
        return tmp  # a folder that is not the working one
    if any(w in name for w in ("FILE", "PATH", "BASE", "DIR", "LOG")):
        return os.path.join(tmp, "named-by-" + name.lower())
    return "1"


def payload(out):
    """The artifact in nvrtc_one's output, or None when the compile failed."""
    if not out.startswith(b"rc 0\nlog "):
        return None
    return out


def main():
    with tempfile.TemporaryDirectory(prefix="kcache env ") as tmp:
        work = os.path.join(tmp, "work")
        os.makedirs(work)
        with open(os.path.join(work, "k.cu"), "w") as f:
            f.write(KERNEL)
        env0 = kctest.dropin_env(tmp, has_nvrtc)
        seen = observe(tmp, env0, work)
        print("NVRTC reads:", " ".join(f"{n}({','.join(sorted(k))})" for n, k in sorted(seen.items())))
        check("LLVM_OVERRIDE_PRODUCER" in seen, "NVRTC reads LLVM_OVERRIDE_PRODUCER (else the "
              "recorder sees nothing)")
        for name in seen:
            env0.pop(name, None)
        rep = os.path.join(tmp, "report")
        runs = [0]

        def nvrtc(tag, kind, env, shim):
            runs[0] += 1
            out = os.path.join(tmp, f"out-{runs[0]}-{tag}")
            wrap = [KCACHE, "run", "--"] if shim else []
            e = dict(env, KCACHE_NVRTC_REPORT=rep) if shim else env
            rc = kctest.run_logged(wrap + [ONE, out, "k.cu", "k.cu", "--"] + KINDS[kind], e, work)
            got = kctest.read_bytes(out) if rc == 0 and os.path.exists(out) else b"exit %d" % rc
            return got, (read_report(rep) if shim else [])

        def cli(kind, env):
            runs[0] += 1
            out = os.path.join(tmp, f"cli-{runs[0]}.{kind}")
            p = subprocess.run([KCACHE, "compile", "k.cu", "--arch", "sm_90", "-o", out]
                               + CLI_KIND[kind], env=env, cwd=work, capture_output=True)
            got = kctest.read_bytes(out) if p.returncode == 0 and os.path.exists(out) else None
            return got, (p.stdout + p.stderr).decode(errors="replace").strip()

        changed = []
        ref0s = {}
        for name in sorted(seen):
            kind = next(k for k in KINDS if k in seen[name])
            envv = dict(env0, **{name: value_for(name, tmp)})
            if kind not in ref0s:
                ref0s[kind] = nvrtc("ref0", kind, env0, False)[0]
            ref0 = ref0s[kind]
            refv, _ = nvrtc("refv", kind, envv, False)
            if refv != ref0:
                changed.append(name)
            for step, env, ref in (("without", env0, ref0), ("with", envv, refv),
                                   ("without again", env0, ref0)):
                got, r = nvrtc("shim", kind, env, True)
                check(got == ref, f"{name} ({kind}), {step} it: the drop-in gives NVIDIA's "
                      f"answer ({'' if got == ref else 'STALE' if got in (ref0, refv) else 'other'}; {r})")
                got, said = cli(kind, env)
                want = payload(ref)
                ok = (got is None) if want is None else (got is not None and want.endswith(got)
                                                         and len(got) > 0)
                check(ok, f"{name} ({kind}), {step} it: kcache compile gives NVIDIA's bytes "
                      f"({'' if ok else 'STALE ' if got and want else ''}{said})")
        print("changes NVIDIA's answer:", " ".join(changed))
        check("LLVM_OVERRIDE_PRODUCER" in changed, "LLVM_OVERRIDE_PRODUCER changes NVIDIA's "
              "LTO-IR (else the test shows nothing)")
    return check.status()


if __name__ == "__main__":
    sys.exit(main())

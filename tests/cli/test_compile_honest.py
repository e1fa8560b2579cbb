#!/usr/bin/env python3
"""'kcache compile' with the real NVRTC: every row says what
happened, outputs are claimed only once written, per-file name expressions,
request files, the cap's evictions, and stats that keep errors apart.

Usage: test_compile_honest.py KCACHE KCACHE_FILL [TEST-NAME...]
Exits 77 (skipped) when kcache cannot compile here (no CUDA toolkit).
The kernels are written by the test itself: nothing outside the build.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_cli as base  # noqa: E402  (the same harness, same arguments)
from kctest import Cache, check  # noqa: E402  (on the path test_cli set)

SAXPY = """extern "C" __global__ void saxpy(float a, const float *x, float *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + y[i];
}
"""
SCALE = """template <typename T> __global__ void scale(T *x, T a) { x[threadIdx.x] *= a; }
"""
BROKEN = """__global__ void broken(float *x) { x[0] = undefined_symbol; }
"""
# #include_next cannot be keyed: such a compile is made without the cache.
INCLUDE_NEXT = """#include <k.h>
__global__ void k(float *x) { x[0] = K; }
"""


def write(root, name, text):
    path = os.path.join(root, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


def rows(out):
    return [l.split() for l in out.splitlines() if l.strip()]


def test_error_rows(root):
    c = Cache(root)
    good = write(root, "saxpy.cu", SAXPY)
    bad = write(root, "broken.cu", BROKEN)
    cases = [
        ([bad, "--arch", "sm_90"], "undefined_symbol"),
        ([good, "--arch", "sm_91"], "arch"),
        ([good, "--arch", "sm_90", "--std", "c++99"], "std"),
        ([good, "--arch", "sm_90", "--", "--bogus-flag"], "bogus"),
        ([os.path.join(root, "nope.cu"), "--arch", "sm_90"], "nope.cu"),
    ]
    for args, why in cases:
        out, err = c.run("compile", *args, rc=1)
        r = rows(out)
        check(len(r) == 1 and r[0][0] == "error", "an error row for %s: %r" % (args, out))
        check("cache" not in r[0] and "miss" not in r[0], "no cache claim: %r" % out)
        check(why.lower() in (out + err).lower(), "the reason (%s) is given: %r %r" % (why, out, err))
        # --json before "--": what follows goes to NVRTC.
        split = args.index("--") if "--" in args else len(args)
        out, _ = c.run("compile", *args[:split], "--json", *args[split:], rc=1)
        j = json.loads(out)
        item = j["items"][0]
        check(item["status"] == "error" and item["outcome"] == "error", "json status: %s" % item)
        check(item["cached"] is False and item["hit"] is False, "json cached false: %s" % item)
        check(item["message"], "json has the reason")
        check(j["errors"] == 1 and j["misses"] == 0, "json counts: %s" % j)
    st = c.json("stats")
    # nope.cu never reached NVRTC, and NVRTC refused sm_91, c++99 and --bogus-flag (each
    # twice): bad requests, apart from the source that did not compile (twice).
    check(st["misses"] == 0 and st["errors"] == 2 and st["request_errors"] == 8 and
          st["entries"] == 0, "stats counts errors apart from misses: %s" % st)
    out, _ = c.run("stats")
    check(re.search(r"^Errors:\s+2\b", out, re.M) and re.search(r"^Bad requests:\s+8\b", out, re.M),
          "stats shows errors: %s" % out)


def test_uncacheable_counted_apart(root):
    c = Cache(root)
    first = os.path.dirname(write(root, "first/k.h", "#include_next <k.h>\n"))
    second = os.path.dirname(write(root, "second/k.h", "#define K 1.0f\n"))
    src = write(root, "next.cu", INCLUDE_NEXT)
    args = [src, "--arch", "sm_90", "-I", first, "-I", second]
    j = c.json("compile", *args)
    item = j["items"][0]
    check(item["status"] == "ok" and item["cached"] is False and item["outcome"] == "uncached",
          "#include_next is compiled, not cached: %s" % item)
    check(j["uncached"] == 1 and j["misses"] == 0, "json counts: %s" % j)
    out, _ = c.run("compile", *args)
    check(rows(out)[0][0] == "uncached", "the row says uncached: %r" % out)
    st = c.json("stats")
    check(st["uncacheable"] == 2 and st["misses"] == 0, "stats: %s" % st)


def test_outputs_claimed_once_written(root):
    c = Cache(root)
    good = write(root, "saxpy.cu", SAXPY)
    out, err = c.run("compile", good, "--arch", "sm_90", "-o",
                     os.path.join(root, "nodir", "one.cubin"), rc=2)
    check(out == "", "nothing claimed: %r" % out)
    check("nodir" in err and "does not exist" in err, "says why: %r" % err)
    check(c.json("stats")["misses"] == 0, "refused before any compile")
    # Two files with one base name into one directory: refused before compiling.
    a = write(root, "a/k.cu", SAXPY)
    b = write(root, "b/k.cu", SAXPY.replace("saxpy", "saxpy2"))
    outdir = os.path.join(root, "out")
    out, err = c.run("compile", a, b, "--arch", "sm_90", "-o", outdir + "/", rc=2)
    check("k.sm_90.cubin" in err and "both" in err, "the collision is named: %r" % err)
    check(not os.path.exists(os.path.join(outdir, "k.sm_90.cubin")), "nothing written")
    check(c.json("stats")["misses"] == 0, "refused before any compile")
    # A file that cannot be written is an error row, and the output is not claimed.
    ro = os.path.join(root, "ro")
    os.makedirs(ro)
    os.chmod(ro, 0o500)
    try:
        if os.access(ro, os.W_OK):
            return  # root ignores permissions: the rest cannot be shown here
        j = c.json("compile", good, "--arch", "sm_90,sm_80", "-o", ro, rc=1)
        for item in j["items"]:
            check(item["output"] is None and item["status"] == "error",
                  "an unwritten output is not claimed: %s" % item)
    finally:
        os.chmod(ro, 0o700)


def test_per_file_name_expr(root):
    c = Cache(root)
    saxpy = write(root, "saxpy.cu", SAXPY)
    scale = write(root, "scale.cu", SCALE)
    j = c.json("compile", saxpy, scale, "--arch", "sm_90",
               "--name-expr", scale + "=scale<float>")
    check(j["errors"] == 0, "saxpy is not given scale's expression: %s" % j)
    by = {i["source"]: i for i in j["items"]}
    check(by[saxpy]["lowered_names"] == [], "none for saxpy")
    check([n["name_expr"] for n in by[scale]["lowered_names"]] == ["scale<float>"],
          "scale<float> for scale.cu: %s" % by[scale])
    _, err = c.run("compile", saxpy, "--arch", "sm_90", "--name-expr", "other.cu=scale<int>",
                   rc=2)
    check("other.cu" in err, "an expression for a file not given is refused: %r" % err)


def test_request_file(root):
    c = Cache(root)
    write(root, "src/saxpy.cu", SAXPY)
    write(root, "src/scale.cu", SCALE)
    req = write(root, "src/requests.json", json.dumps({"requests": [
        {"source": "saxpy.cu", "arch": ["sm_90", "sm_80"]},
        {"source": "scale.cu", "arch": "sm_90", "name_exprs": ["scale<double>"],
         "options": ["-DSCALE=1"]},
    ]}))
    j = c.json("compile", "--from", req)
    check(len(j["items"]) == 3 and j["errors"] == 0, "three items: %s" % j)
    names = [n["name_expr"] for i in j["items"] for n in i["lowered_names"]]
    check(names == ["scale<double>"], "the request's own expression: %s" % names)
    again = c.json("compile", "--from", req)
    check(again["hits"] == 3, "a second run hits: %s" % again)
    bad = write(root, "bad.json", '{"requests": [{"arch": "sm_90"}]}')
    _, err = c.run("compile", "--from", bad, rc=2)
    check("bad.json" in err and "source" in err, "a request without a source: %r" % err)


def test_compile_says_cap_evicted(root):
    c = Cache(root)
    files = [write(root, "k%d.cu" % i, SAXPY.replace("saxpy", "saxpy%d" % i) + "// %s\n" % ("x" * 4000 * i))
             for i in range(4)]
    out, err = c.run("compile", *files, "--arch", "sm_90", env={"KCACHE_MAX_SIZE": "8K"})
    check("evicted" in err and "cap" in err, "compile says the cap evicted: %r" % err)
    j = c.json("compile", *files, "--arch", "sm_90", "--refresh", env={"KCACHE_MAX_SIZE": "8K"})
    check(any(i.get("evicted") for i in j["items"]), "json marks evicted items: %s" % j)


def test_json_utf8(root):
    c = Cache(root)
    d = os.fsencode(root)
    name = os.path.join(d, b"caf\xe9.cu")
    with open(name, "wb") as f:
        f.write(SAXPY.encode())
    p = subprocess.run([base.KCACHE, "compile", name, "--arch", "sm_90", "--json"],
                       capture_output=True, env=c.env)
    check(p.returncode == 0, "compile: %s" % p.stderr)
    try:
        json.loads(p.stdout.decode("utf-8", "strict"))
    except (UnicodeDecodeError, ValueError) as ex:
        check(False, "compile --json is not valid UTF-8: %s" % ex)


def test_plural_and_units(root):
    c = Cache(root)
    good = write(root, "saxpy.cu", SAXPY)
    c.run("compile", good, "--arch", "sm_90")
    c.run("compile", good, "--arch", "sm_90")
    out, _ = c.run("stats")
    check(not re.search(r"\b1 (entries|kernels|hits|misses)\b", out), out)
    key = c.json("ls")["entries"][0]["key"]
    out, _ = c.run("inspect", key[:12])
    check(not re.search(r"\b1 kernels\b", out), "inspect: 1 kernel, not kernels: %s" % out)


def main():
    probe = tempfile.mkdtemp(prefix="kcache-probe-")
    try:
        src = write(probe, "probe.cu", SAXPY)
        p = subprocess.run([base.KCACHE, "compile", src, "--arch", "sm_90", "--no-cache", "-q"],
                           capture_output=True, env=dict(os.environ, KCACHE_DIR=probe))
        if p.returncode != 0:
            print("skipped: kcache cannot compile here: %s" % p.stderr.decode().strip())
            return 77
    finally:
        shutil.rmtree(probe, ignore_errors=True)
    return base.run_tests(globals())


if __name__ == "__main__":
    sys.exit(main())

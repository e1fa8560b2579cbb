#!/usr/bin/env python3
"""End-to-end tests of 'kcache compile', 'explain', 'inspect' key components and
'verify --recompile', with the real NVRTC on examples/ (no GPU needed).

Usage: test_compile_cli.py KCACHE KCACHE_FILL [TEST-NAME...]
Exits 77 (skipped) when the CUDA toolkit is not there.
"""
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_cli as base  # noqa: E402  (the same harness, same arguments)
import kctest  # noqa: E402  (on the path test_cli set)
from kctest import Cache, check  # noqa: E402

CORPUS = os.environ.get("CORPUS", "")
CCCL = "/usr/local/cuda/include/cccl"


def corpus_copy(root, name="corpus"):
    """A private copy of examples/: tests edit headers."""
    dst = os.path.join(root, name)
    shutil.copytree(CORPUS, dst)
    return dst


def compile_json(c, *args, rc=0, env=None):
    return c.json("compile", *args, rc=rc, env=env)


def test_miss_then_hit(root):
    c = Cache(root)
    src = corpus_copy(root)
    a = compile_json(c, os.path.join(src, "saxpy.cu"), "--arch", "sm_90")
    b = compile_json(c, os.path.join(src, "saxpy.cu"), "--arch", "sm_90")
    ia, ib = a["items"][0], b["items"][0]
    check(not ia["hit"] and ib["hit"], "miss then hit: %s %s" % (ia["hit"], ib["hit"]))
    check(ia["key"] == ib["key"] and len(ia["key"]) == 64, "the same key twice")
    check(a["misses"] == 1 and b["hits"] == 1 and b["errors"] == 0, "counts")
    for field in ("source", "arch", "status", "kind", "cached", "size", "elapsed_ms",
                  "compile_ms", "output", "log", "lowered_names", "store_message"):
        check(field in ib, "compile --json lacks %s" % field)
    st = c.json("stats")
    check(st["hits"] == 1 and st["misses"] == 1 and st["entries"] == 1, "stats: %s" % st)
    # The human output names hit or miss, the key and where the artifact went.
    out, _ = c.run("compile", os.path.join(src, "saxpy.cu"), "--arch", "sm_90")
    check(out.startswith("hit ") and ia["key"][:12] in out and "cache" in out, out)


def test_config_file_read_once(root):
    """A hit reads kcache.conf once, however many settings it asks for (strace)."""
    strace = shutil.which("strace")
    if not strace:
        print("  (skipped: no strace)")
        return
    c = Cache(root)
    src = corpus_copy(root)
    os.makedirs(c.dir, exist_ok=True)
    with open(os.path.join(c.dir, "kcache.conf"), "w") as f:
        f.write("max_size = 2G\nbusy_timeout = 4000\n")
    compile_json(c, os.path.join(src, "saxpy.cu"), "--arch", "sm_90")
    log = os.path.join(root, "strace.log")
    env = dict(c.env)
    p = subprocess.run([strace, "-f", "-e", "trace=openat,open", "-o", log, base.KCACHE, "compile",
                        os.path.join(src, "saxpy.cu"), "--arch", "sm_90"],
                       env=dict(env, LSAN_OPTIONS="detect_leaks=0"), capture_output=True,
                       timeout=120)
    check(p.returncode == 0 and p.stdout.startswith(b"hit "), "a hit under strace: %r" % p.stdout)
    with open(log) as f:
        opens = [l for l in f if "kcache.conf" in l]
    check(len(opens) == 1, "kcache.conf opened %d times: %s" % (len(opens), "".join(opens)))


def test_broken(root):
    c = Cache(root)
    src = corpus_copy(root)
    out, err = c.run("compile", os.path.join(src, "broken.cu"), "--arch", "sm_90", rc=1)
    check("undefined_symbol" in err, "the compiler's log reaches the user: %r" % err)
    check("kcache: " in err, "a kcache message too")
    check(c.json("ls")["entries"] == [], "nothing stored after a failed compile")


def test_outputs_and_get(root):
    c = Cache(root)
    src = corpus_copy(root)
    one = os.path.join(root, "saxpy.cubin")
    r = compile_json(c, os.path.join(src, "saxpy.cu"), "--arch", "sm_90", "-o", one)
    with open(one, "rb") as f:
        data = f.read()
    check(data[:4] == b"\x7fELF", "a CUBIN written to -o")
    got, _ = c.run("get", r["items"][0]["key"][:16], binary=True)
    check(got == data, "kcache get gives the same bytes")
    outdir = os.path.join(root, "out")
    r = compile_json(c, os.path.join(src, "saxpy.cu"), os.path.join(src, "tiled_gemm.cu"),
                     "--arch", "sm_90,sm_80", "-o", outdir + "/", "-j", "2")
    check(len(r["items"]) == 4 and r["errors"] == 0, "2 files x 2 archs")
    names = sorted(os.listdir(outdir))
    check(names == ["saxpy.sm_80.cubin", "saxpy.sm_90.cubin", "tiled_gemm.sm_80.cubin",
                    "tiled_gemm.sm_90.cubin"], "outputs: %s" % names)
    ptx = compile_json(c, os.path.join(src, "saxpy.cu"), "--arch", "sm_90", "--ptx",
                       "-o", os.path.join(root, "s.ptx"))["items"][0]
    check(ptx["kind"] == "ptx" and ptx["arch"] == "compute_90", "PTX for sm_90 is compute_90's")
    with open(os.path.join(root, "s.ptx")) as f:
        check(".entry saxpy" in f.read(), "PTX text written")


def test_output_rewritten_only_when_it_differs(root):
    """A hit leaves an output that already holds its bytes in place (times set
    to now, as a write would), and replaces one that differs, is linked
    elsewhere, is another user's or writable by others, or is a symbolic
    link, never writing through it."""
    c = Cache(root)
    src = corpus_copy(root)
    out = os.path.join(root, "saxpy.cubin")
    args = (os.path.join(src, "saxpy.cu"), "--arch", "sm_90", "-o", out)
    compile_json(c, *args)
    with open(out, "rb") as f:
        data = f.read()
    os.utime(out, (1e9, 1e9))
    before = os.stat(out)
    check(compile_json(c, *args)["items"][0]["hit"], "a hit")
    after = os.stat(out)
    check(after.st_ino == before.st_ino, "the same bytes are not written again")
    check(after.st_mtime > 1e9 + 1e6, "its time is now, as a write would have set it")
    # Damaged, same size: replaced with the right bytes.
    with open(out, "r+b") as f:
        f.seek(100)
        f.write(b"\0" * 16)
    compile_json(c, *args)
    with open(out, "rb") as f:
        check(f.read() == data, "an output that differs is replaced")
    # Writable by others, or another user's (a planted file with the right
    # bytes): replaced, so that the output is the caller's alone.
    os.chmod(out, 0o666)
    ino = os.stat(out).st_ino
    compile_json(c, *args)
    check(os.stat(out).st_ino != ino, "an output others may write is replaced")
    if os.geteuid() == 0:
        os.chown(out, 65534, 65534)
        os.chmod(out, 0o644)
        compile_json(c, *args)
        check(os.stat(out).st_uid == 0, "another user's output is replaced by one of ours")
    # A second name: replaced, so that the other name keeps what it had.
    other = os.path.join(root, "other.cubin")
    os.link(out, other)
    compile_json(c, *args)
    check(os.stat(out).st_ino != os.stat(other).st_ino, "a linked output is replaced")
    os.unlink(other)
    # A symbolic link to a file with the same bytes: the link is replaced.
    target = os.path.join(root, "target.cubin")
    shutil.copy(out, target)
    os.unlink(out)
    os.symlink(target, out)
    compile_json(c, *args)
    check(not os.path.islink(out), "a symbolic link is replaced, not written through")
    with open(out, "rb") as f:
        check(f.read() == data, "the output's bytes")


def test_checkout_moved_hits(root):
    c = Cache(root)
    a = corpus_copy(root, "checkout-a")
    b = corpus_copy(root, os.path.join("elsewhere", "checkout-b"))
    ra = compile_json(c, os.path.join(a, "headers", "main.cu"), "-I",
                      os.path.join(a, "headers", "include"), "--arch", "sm_90")["items"][0]
    rb = compile_json(c, os.path.join(b, "headers", "main.cu"), "-I",
                      os.path.join(b, "headers", "include"), "--arch", "sm_90")["items"][0]
    check(not ra["hit"] and rb["hit"] and ra["key"] == rb["key"],
          "a moved checkout hits: %s %s" % (ra["hit"], rb["hit"]))
    # Editing a header main.cu never includes changes nothing.
    with open(os.path.join(b, "headers", "include", "unrelated.cuh"), "a") as f:
        f.write("#define MORE 1\n")
    rb = compile_json(c, os.path.join(b, "headers", "main.cu"), "-I",
                      os.path.join(b, "headers", "include"), "--arch", "sm_90")["items"][0]
    check(rb["hit"], "an unrelated header does not invalidate")


def test_computed_include(root):
    c = Cache(root)
    src = corpus_copy(root)
    cu = os.path.join(src, "computed_include.cu")
    first = compile_json(c, cu, "--arch", "sm_90", "-o", os.path.join(root, "a.cubin"))
    check(first["items"][0]["cached"], "the macro's header was worked out")
    with open(os.path.join(src, "headers", "include", "common.cuh"), "a") as f:
        f.write("__device__ inline float common_twice(float x) { return 4.0f * x; }\n")
    second = compile_json(c, cu, "--arch", "sm_90")["items"][0]
    check(not second["hit"] and second["key"] != first["items"][0]["key"],
          "never the old artifact after the header changed")


def test_disabled_and_unusable_store(root):
    c = Cache(root)
    src = corpus_copy(root)
    r = compile_json(c, os.path.join(src, "saxpy.cu"), "--arch", "sm_90",
                     env={"KCACHE_DISABLE": "1"})
    check(r["errors"] == 0 and not r["items"][0]["cached"], "KCACHE_DISABLE compiles uncached")
    check(not os.path.exists(c.db), "KCACHE_DISABLE creates no cache")
    # A cache directory that cannot exist (its parent is a file): the compile still works.
    blocker = os.path.join(root, "file")
    open(blocker, "w").close()
    out, err = c.run("compile", os.path.join(src, "saxpy.cu"), "--arch", "sm_90", "-o",
                     os.path.join(root, "x.cubin"), env={"KCACHE_DIR": os.path.join(blocker, "d")})
    check("not cached" in err and "cannot create directory" in err,
          "says the cache was not used, and why: %r" % err)
    with open(os.path.join(root, "x.cubin"), "rb") as f:
        check(f.read(4) == b"\x7fELF", "and still writes the artifact")


def test_explain(root):
    c = Cache(root)
    src = corpus_copy(root)
    cu = os.path.join(src, "headers", "main.cu")
    inc = os.path.join(src, "headers", "include")
    compile_json(c, cu, "-I", inc, "--arch", "sm_90", "-D", "MODE=1")
    same = c.json("explain", cu, "-I", inc, "--arch", "sm_90", "-D", "MODE=1")
    check(same["hit"], "explain of a stored request: a hit")

    def differing(*args):
        d = c.json("explain", cu, "-I", inc, *args)
        check(not d["hit"] and d["nearest"], "explain %s: a miss with a nearest entry" % (args,))
        return {x["component"] for x in d["nearest"][0]["differences"]}

    check(differing("--arch", "sm_90", "-D", "MODE=2") == {"option"}, "a changed option")
    check(differing("--arch", "sm_80", "-D", "MODE=1") == {"arch"}, "a different architecture")
    if os.path.isdir(CCCL):
        check(differing("--arch", "sm_90", "-D", "MODE=1", "-I", CCCL) == {"toolkit-include-dir"},
              "one more toolkit directory")
    with open(os.path.join(inc, "detail", "math.cuh"), "a") as f:
        f.write("// changed\n")
    check(differing("--arch", "sm_90", "-D", "MODE=1") == {"header"}, "a changed header")
    out, _ = c.run("explain", cu, "-I", inc, "--arch", "sm_90", "-D", "MODE=1")
    check("detail/math.cuh" in out and "header" in out, "the header is named: %s" % out)


def test_inspect_key_components(root):
    c = Cache(root)
    src = corpus_copy(root)
    key = compile_json(c, os.path.join(src, "headers", "main.cu"), "-I",
                       os.path.join(src, "headers", "include"), "--arch", "sm_90")["items"][0]["key"]
    d = c.json("inspect", key[:12])
    comps = {x["component"] for x in d["key_components"]}
    for want in ("format", "arch", "nvrtc", "source", "header"):
        check(want in comps, "inspect shows the key's %s" % want)
    # The name only where it can change the bytes (compile/progname.c): not here.
    check("any-source-name" in comps and "source-name" not in comps,
          "inspect shows the key leaves the source's name out")
    headers = [x["value"] for x in d["key_components"] if x["component"] == "header"]
    check(any(h.startswith("common.cuh ") for h in headers) and
          any(h.startswith("local_config.cuh ") for h in headers), "headers by spelling")
    check(not any(src in h for h in headers), "no absolute path in the key")
    out, _ = c.run("inspect", key[:12], "--source")
    check("BLEND_WEIGHT" in out, "inspect --source shows the stored inputs")


def alter_consistently(db):
    """Replaces one artifact with other bytes and matching digests: only a
    rebuild can tell (the stored bytes pass every digest check)."""
    con = sqlite3.connect(db)
    try:
        eid, raw_size = con.execute("SELECT id, raw_size FROM entry ORDER BY id LIMIT 1").fetchone()
        data = bytes((i * 7) & 0xFF for i in range(raw_size))
        digest = hashlib.blake2b(data, digest_size=32).digest()
        con.execute("UPDATE entry SET codec = 0, stored_size = ?, digest = ? WHERE id = ?",
                    (len(data), digest, eid))
        con.execute("UPDATE artifact SET data = ?, stored_digest = ? WHERE id = ?",
                    (data, digest, eid))
        con.execute("UPDATE totals SET stored_bytes = (SELECT sum(stored_size) FROM entry)")
        con.commit()
    finally:
        con.close()


def test_verify_recompile(root):
    c = Cache(root)
    src = corpus_copy(root)
    compile_json(c, os.path.join(src, "saxpy.cu"), os.path.join(src, "headers", "main.cu"),
                 "-I", os.path.join(src, "headers", "include"), "--arch", "sm_90,sm_80")
    compile_json(c, os.path.join(src, "tiled_gemm.cu"), "--arch", "sm_90", "--name-expr",
                 "tiled_gemm<float, 16>", "--ptx")
    d = c.json("verify", "--recompile")
    check(d["ok"] and d["recompile"]["identical"] == 5 and d["recompile"]["different"] == 0,
          "a fresh cache rebuilds byte for byte: %s" % d.get("recompile"))
    d = c.json("verify", "--recompile", "2")
    check(d["recompile"]["checked"] == 2, "--recompile N rebuilds N")
    alter_consistently(c.db)
    plain = c.json("verify")
    check(plain["ok"], "the altered artifact passes the digest checks (it was made to)")
    before = len(c.entries())
    d = c.json("verify", "--recompile", rc=1)
    check(not d["ok"] and d["recompile"]["different"] == 1,
          "verify --recompile fails on an altered artifact: %s" % d.get("recompile"))
    # The altered entry is removed, never served again.
    check(len(c.entries()) == before - 1, "the altered entry is still there")
    d = c.json("verify", "--recompile")
    check(d["ok"] and d["recompile"]["different"] == 0, "after removal: %s" % d.get("recompile"))
    alter_consistently(c.db)
    _, err = c.run("verify", "--recompile", rc=1)
    check("differ" in err and "removed" in err, "and says so: %r" % err)


def test_parallel_warm_up(root):
    """What CI does: several files x architectures with -j, then every item hits."""
    c = Cache(root)
    src = corpus_copy(root)
    files = [os.path.join(src, f) for f in ("saxpy.cu", "tiled_gemm.cu", "computed_include.cu")]
    first = compile_json(c, *files, "--arch", "sm_80,sm_90,sm_90a", "-j", "4")
    check(first["misses"] == 9 and first["errors"] == 0, "9 misses: %s" % first["misses"])
    second = compile_json(c, *files, "--arch", "sm_80,sm_90,sm_90a", "-j", "4")
    check(second["hits"] == 9, "then 9 hits: %s" % second["hits"])


def test_bad_arch_is_usage_error(root):
    c = Cache(root)
    src = corpus_copy(root)
    for bad in ("sm_abc", "sm_", "sm_99999999", "", "compute_", "gfx90a"):
        _, err = c.run("compile", os.path.join(src, "saxpy.cu"), "--arch", bad, rc=2)
        check(len(err.splitlines()) == 1 and err.startswith("kcache: "), "%r: %r" % (bad, err))
    check(not os.path.exists(c.db), "nothing opened or stored for a bad architecture")


def test_arch_native(root):
    """--arch native asks the driver: works on a GPU machine, fails clearly without one."""
    c = Cache(root)
    src = corpus_copy(root)
    d = c.json("compile", os.path.join(src, "saxpy.cu"), "--arch", "native", rc=None)
    item = d["items"][0]
    if item["status"] == "ok":
        check(item["arch"].startswith("sm_") and item["arch"][3:].isdigit(),
              "native resolved to a real architecture: %s" % item["arch"])
    else:
        check("needs a GPU" in item["message"] and "--arch sm_90" in item["message"],
              "without a driver the message says what to pass: %r" % item["message"])
        _, err = c.run("compile", os.path.join(src, "saxpy.cu"), "--arch", "native", rc=1)
        check(len(err.strip().splitlines()) == 1, "one line: %r" % err)


def test_block_sort_many_processes(root):
    """Eight kcache processes miss block_sort.cu at once: NVRTC runs once."""
    c = Cache(root)
    src = corpus_copy(root)
    cu = os.path.join(src, "block_sort.cu")
    results = [None] * 8

    def one(i):
        results[i] = compile_json(c, cu, "--arch", "sm_90", "-I", CCCL, "--std", "c++17")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    hits = sum(r["hits"] for r in results)
    misses = sum(r["misses"] for r in results)
    check(misses == 1 and hits == 7, "one compile, seven waits: %d misses" % misses)
    check(len({r["items"][0]["key"] for r in results}) == 1, "one key")


def main():
    if not CORPUS or not os.path.isdir(CORPUS):
        print("CORPUS not set")
        return 1
    probe = tempfile.mkdtemp(prefix="kcache-probe-")
    try:
        p = subprocess.run([base.KCACHE, "compile", os.path.join(CORPUS, "saxpy.cu"), "--arch",
                            "sm_90", "--no-cache", "-q"], capture_output=True,
                           env=dict(os.environ, KCACHE_DIR=probe))
        if p.returncode != 0:
            print("skipped: kcache cannot compile here: %s" % p.stderr.decode().strip())
            return 77
    finally:
        shutil.rmtree(probe, ignore_errors=True)
    return kctest.run_tests(globals(), base.ONLY, prefix="kcache-compile-")

if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""End-to-end tests of the kcache command line.

Usage: test_cli.py KCACHE KCACHE_FILL [TEST-NAME...]

Each test runs the real executable against a cache in a fresh directory; the
entries come from kcache-fill (synthetic, through the public API), so that no
compiler is needed. Exits 0 when every test passed, 1 otherwise.
"""
import hashlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pyhelp"))
import kctest  # noqa: E402
# The other CLI scripts take these from here, with the arguments parsed.
from kctest import Cache, Failure, check  # noqa: E402,F401

KCACHE = os.path.abspath(sys.argv[1])
FILL = os.path.abspath(sys.argv[2])
ONLY = sys.argv[3:]
kctest.setup(KCACHE, FILL)

# The verbs, in the order `kcache --help` lists them: every one is run below,
# and a verb the help gains or loses fails the test until it is added here.
VERBS = ["compile", "explain", "stats", "ls", "inspect", "get", "prune", "export", "import", "verify",
         "remote", "config", "clear", "vacuum", "recompress", "run", "path", "version"]
GiB = 1 << 30


def fields(obj, want, what):
    for name, kind in want.items():
        check(name in obj, "%s: field '%s' missing in %s" % (what, name, sorted(obj)))
        check(isinstance(obj[name], kind) and not isinstance(obj[name], bool) or
              (kind is bool and isinstance(obj[name], bool)),
              "%s: field '%s' is %r, wanted %s" % (what, name, obj[name], kind.__name__))


def help_verbs(text):
    """The verbs of `kcache --help`: the first word of each line under "Verbs:"."""
    lines = text.splitlines()
    check("Verbs:" in lines, "kcache --help has no Verbs: section")
    verbs = []
    for line in lines[lines.index("Verbs:") + 1:]:
        if not line.strip():
            break
        verbs.append(line.split()[0])
    return verbs


def disk_bytes(db):
    return sum(os.path.getsize(p) for p in (db, db + "-wal") if os.path.exists(p))


def alter_artifact(db, nth=0):
    """Flips a byte in the middle of one stored artifact, keeping its length."""
    con = sqlite3.connect(db)
    try:
        row = con.execute("SELECT id, data FROM artifact ORDER BY id LIMIT 1 OFFSET ?",
                          (nth,)).fetchone()
        data = bytearray(row[1])
        data[len(data) // 2] ^= 0x55
        con.execute("UPDATE artifact SET data = ? WHERE id = ?", (bytes(data), row[0]))
        con.commit()
    finally:
        con.close()


# ---- tests ---------------------------------------------------------------

def test_help_and_usage(root):
    c = Cache(root)
    out, _ = c.run("--help")
    listed = help_verbs(out)
    check(listed == VERBS, "kcache --help lists %s, the test knows %s" % (listed, VERBS))
    for verb in VERBS:
        out, err = c.run(verb, "--help")
        check(out.startswith("usage: kcache %s" % verb), "%s --help: %r" % (verb, out[:80]))
        check(err == "", "%s --help wrote to stderr: %r" % (verb, err))
        out, err = c.run("help", verb)
        check(out.startswith("usage: kcache %s" % verb), "help %s" % verb)
    for verb in VERBS:
        out, err = c.run(verb, "--no-such-flag", rc=2)
        lines = err.splitlines()
        check(len(lines) == 1 and lines[0].startswith("kcache: "),
              "%s with a bad flag: stderr %r" % (verb, err))
        check("--no-such-flag" in err, "%s: the message does not name the flag" % verb)
        check(out == "", "%s with a bad flag wrote to stdout" % verb)
    _, err = c.run("no-such-verb", rc=2)
    check(err.startswith("kcache: "), "unknown verb message")
    # Values that are not values.
    for args in (["prune", "--max-size", "lots"], ["prune", "--older-than", "soon"],
                 ["ls", "--sort", "color"], ["ls", "--kind", "elf"], ["ls", "--limit", "-3"],
                 ["export", "--since", "yesterday", "x.kcache"], ["ls", "--arch"]):
        _, err = c.run(*args, rc=2)
        check(len(err.splitlines()) == 1 and err.startswith("kcache: "), "%s: %r" % (args, err))


def test_version_and_path(root):
    c = Cache(root)
    out, _ = c.run("version")
    check(out.startswith("kcache "), "version: %r" % out)
    v = c.json("version")
    fields(v, {"version": str, "library_version": str}, "version --json")
    check(v["version"] == v["library_version"], "CLI and library versions differ")
    out, _ = c.run("path")
    check(out.strip() == c.db, "path printed %r, wanted %r" % (out, c.db))
    check(not os.path.exists(c.db), "kcache path created the database")
    p = c.json("path")
    fields(p, {"path": str, "dir": str, "config_file": str}, "path --json")
    check(p["config_file"] == os.path.join(c.dir, "kcache.conf"), "config file %r" % p)
    other = os.path.join(root, "elsewhere", "x.db")
    out, _ = c.run("--path", other, "path")
    check(out.strip() == other, "--path not honoured: %r" % out)
    out, _ = c.run("path", env={"KCACHE_PATH": other})
    check(out.strip() == other, "KCACHE_PATH not honoured: %r" % out)


def test_ls(root):
    c = Cache(root)
    c.fill(6, "--arch", "sm_90", "--kind", "cubin", "--size", "1000", "--seed", 1)
    c.fill(4, "--arch", "sm_80", "--kind", "ptx", "--size", "50000", "--seed", 2)
    doc = c.json("ls")
    check(len(doc["entries"]) == 10, "ls: %d entries, wanted 10" % len(doc["entries"]))
    for e in doc["entries"]:
        fields(e, {"key": str, "kind": str, "arch": str, "name": str, "size": int,
                   "stored_size": int, "hits": int, "created_ms": int, "accessed_ms": int,
                   "compile_ns": int, "toolchain": str}, "ls --json entry")
        check(len(e["key"]) == 64, "key is not 64 hex digits")
    check(len(c.json("ls", "--arch", "sm_80")["entries"]) == 4, "ls --arch")
    check({e["kind"] for e in c.json("ls", "--kind", "ptx")["entries"]} == {"ptx"}, "ls --kind")
    check(len(c.json("ls", "--limit", "3")["entries"]) == 3, "ls --limit")
    sizes = [e["size"] for e in c.json("ls", "--sort", "size")["entries"]]
    check(sizes == sorted(sizes, reverse=True), "ls --sort size: %r" % sizes)
    check(sizes[0] == 50000, "largest entry %d" % sizes[0])
    out, _ = c.run("ls")
    lines = out.splitlines()
    check(lines[0].split()[:3] == ["KEY", "KIND", "ARCH"], "ls header: %r" % lines[0])
    check(len(lines) == 11, "ls prints %d lines" % len(lines))
    check("48.8 KiB" in out, "ls does not print sizes in binary units:\n" + out)
    # An empty cache lists nothing, and says nothing on stderr.
    e = Cache(root, "empty")
    e.fill(0)
    check(e.json("ls")["entries"] == [], "empty ls")


def test_inspect(root):
    c = Cache(root)
    keys = c.fill(2, "--inputs", "--names", "--seed", 3)
    ptx_file = os.path.join(root, "k.ptx")
    with open(ptx_file, "w") as f:
        f.write(".version 8.0\n.target sm_90\n.visible .entry k() { ret; }\n")
    ptx_key = c.fill(1, "--kind", "ptx", "--data", ptx_file, "--seed", 4)[0]
    doc = c.json("inspect", keys[0][:12], "--source")
    fields(doc, {"key": str, "kind": str, "arch": str, "name": str, "size": int,
                 "stored_size": int, "blake2b": str, "created_ms": int, "accessed_ms": int,
                 "hits": int, "compile_ns": int, "toolchain": str, "key_material_size": int,
                 "names": list, "inputs": list, "log": str}, "inspect --json")
    check(doc["key"] == keys[0], "inspect found another entry")
    check(doc["names"] == [{"expression": "k0", "lowered": "_Z2k0v"}], "names %r" % doc["names"])
    check([i["role"] for i in doc["inputs"]] == ["source", "header"], "inputs %r" % doc["inputs"])
    check("__global__ void k0()" in doc["inputs"][0]["text"], "--source text missing")
    check(doc["log"] == "warning: synthetic entry", "log %r" % doc["log"])
    check(doc["blake2b"] == hashlib.blake2b(c.get(keys[0]), digest_size=32).hexdigest(),
          "inspect's digest is not BLAKE2b-256 of the bytes get returns")
    out, _ = c.run("inspect", keys[0][:12], "--log", "--source")
    check("warning: synthetic entry" in out, "--log does not show the log")
    check("==> common.cuh (header) <==" in out and "shared header" in out, "--source")
    check("_Z2k0v" in out, "lowered name missing")
    out, _ = c.run("inspect", ptx_key, "--ptx")
    check(".visible .entry k()" in out, "--ptx does not show the PTX")
    check(c.json("inspect", ptx_key, "--ptx")["ptx"].startswith(".version"), "json ptx")
    # A prefix that matches nothing, and one too short.
    _, err = c.run("inspect", "ffffffffffff", rc=1)
    check(err.startswith("kcache: ") and len(err.splitlines()) == 1, "miss: %r" % err)
    # A prefix that cannot be one is a usage error, before any cache is opened.
    _, err = c.run("inspect", "ab", rc=2)
    check(len(err.splitlines()) == 1 and "hex digits" in err, "short prefix: %r" % err)
    _, err = c.run("get", "xyz!", "-o", os.path.join(root, "x"), rc=2)
    check(len(err.splitlines()) == 1 and "hex digits" in err, "non-hex prefix: %r" % err)
    # Inspecting is not a hit.
    check(c.json("stats")["hits"] == 0, "inspect counted a hit")


def test_inspect_cubin(root):
    fixtures = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures",
                            "cubin")
    # The fixtures are part of the repository: without them this test fails,
    # it does not pass having checked nothing.
    fixture = os.path.join(fixtures, "gemm_sm90.cubin")
    check(os.path.isfile(fixture), "the CUBIN fixture %s is missing" % fixture)
    c = Cache(root)
    key = c.fill(1, "--data", fixture)[0]
    doc = c.json("inspect", key)
    check("cubin" in doc, "inspect of a CUBIN shows no cubin section: %r" % doc.get("cubin_error"))
    fields(doc["cubin"], {"sm": int, "arch": str, "kernels": list}, "inspect cubin")
    check(doc["cubin"]["arch"] == "sm_90", "cubin arch %r" % doc["cubin"]["arch"])
    # Its two tiled_gemm instantiations, as tests/format/test_cubin.c reads them.
    names = sorted(k["name"] for k in doc["cubin"]["kernels"])
    check(names == ["_Z10tiled_gemmIdLi8EEvPKT_S2_PS0_i", "_Z10tiled_gemmIfLi16EEvPKT_S2_PS0_i"],
          "cubin kernels %r" % names)
    for k in doc["cubin"]["kernels"]:
        fields(k, {"name": str, "registers": int, "shared_bytes": int, "local_bytes": int,
                   "spill_bytes": int, "constant_bytes": int, "param_bytes": int,
                   "max_threads": int}, "cubin kernel")
    out, _ = c.run("inspect", key)
    check("REGS" in out, "human inspect has no kernel table")
    # Bytes that are not ELF: inspect still works and says so.
    bad = c.fill(1, "--seed", 9)[0]
    doc = c.json("inspect", bad)
    check("cubin_error" in doc and "cubin" not in doc, "garbage CUBIN: %r" % sorted(doc))


def test_get(root):
    c = Cache(root)
    blob = os.path.join(root, "blob.bin")
    data = bytes(range(256)) * 300 + b"\x00tail"
    with open(blob, "wb") as f:
        f.write(data)
    key = c.fill(1, "--data", blob)[0]
    out_file = os.path.join(root, "out.cubin")
    c.run("get", key[:8], "-o", out_file)
    with open(out_file, "rb") as f:
        check(f.read() == data, "get -o wrote other bytes")
    check(c.get(key[:8]) == data, "get to a pipe wrote other bytes")
    _, err = c.run("get", "0000000000", "-o", out_file, rc=1)
    check(err.startswith("kcache: "), "get of a missing key: %r" % err)
    c.run("get", rc=2)
    check(c.json("stats")["hits"] == 0, "get counted a hit")
    # Binary bytes never go to a terminal.
    master, slave = os.openpty()
    try:
        p = subprocess.run([KCACHE, "get", key], env=c.env, stdout=slave,
                           stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, timeout=60)
    finally:
        os.close(slave)
        os.close(master)
    err = p.stderr.decode()
    check(p.returncode == 2 and "terminal" in err and "-o FILE" in err,
          "get to a terminal: exit %d, %r" % (p.returncode, err))


def test_stats(root):
    c = Cache(root)
    c.fill(3, "--size", "2048")
    s = c.json("stats")
    fields(s, {"path": str, "schema_version": int, "entries": int, "raw_bytes": int,
               "stored_bytes": int, "disk_bytes": int, "hits": int, "misses": int,
               "usage": list}, "stats --json")
    check(s["entries"] == 3 and s["raw_bytes"] == 3 * 2048, "stats counts %r" % s)
    out, _ = c.run("stats")
    check("Entries:" in out and "KiB" in out, "stats human output")


def test_stats_zero(root):
    """stats --zero shows the counters, then zeroes them; the entries stay."""
    c = Cache(root)
    c.fill(5, "--size", "1000")
    missing = os.path.join(root, "missing.cu")
    c.run("compile", missing, "--arch", "sm_90", rc=1)
    c.json("prune", "--max-entries", "3")
    before = c.json("stats")
    check(before["request_errors"] == 1 and before["evictions"] == 2, "counters %r" % before)
    shown = c.json("stats", "--zero")
    check(shown["request_errors"] == 1 and shown["evictions"] == 2,
          "stats --zero --json shows the counters as they were: %r" % shown)
    after = c.json("stats")
    for name in ("hits", "misses", "errors", "request_errors", "evictions", "conflicts"):
        check(after[name] == 0, "stats --zero left %s at %r" % (name, after[name]))
    check(after["entries"] == 3 and len(c.entries()) == 3, "stats --zero removed entries")
    c.run("compile", missing, "--arch", "sm_90", rc=1)
    out, _ = c.run("stats", "--zero")
    check(re.search(r"^Bad requests:\s+1\b", out, re.M) and "Counters zeroed." in out,
          "stats --zero: %r" % out)
    check(c.json("stats")["request_errors"] == 0, "stats --zero did not zero")


def test_ambiguous_prefix(root):
    """A prefix two entries share: inspect and get say so in one line; more digits find each."""
    c = Cache(root)
    by_prefix = {}
    for key in c.fill(1500, "--size", "64", "--seed", 7):
        by_prefix.setdefault(key[:4], []).append(key)
    pairs = [keys for keys in by_prefix.values() if len(keys) == 2]
    check(pairs, "no two of 1500 keys share 4 hex digits: take another seed")
    a, b = pairs[0]
    n = len(os.path.commonprefix([a, b]))
    shared = a[:n]
    for verb in ("inspect", "get"):
        _, err = c.run(verb, shared, rc=1, binary=True)
        check(len(err.splitlines()) == 1 and
              "more than one entry starts with %s: give more digits" % shared in err,
              "%s of a shared prefix: %r" % (verb, err))
    for key in (a, b):
        check(c.json("inspect", key[:n + 1])["key"] == key, "inspect %s" % key[:n + 1])
        check(len(c.get(key[:n + 1])) == 64, "get %s" % key[:n + 1])


def test_prune(root):
    c = Cache(root)
    c.fill(120, "--size", "65536", "--seed", 5)
    c.fill(10, "--arch", "sm_80", "--size", "1024", "--seed", 6)
    before = disk_bytes(c.db)
    check(before > 3 * (1 << 20), "the cache is too small to test pruning: %d" % before)
    d = c.json("prune", "--max-size", "2M", "--dry-run")
    fields(d, {"dry_run": bool, "evicted": int, "evicted_bytes": int, "disk_before": int,
               "disk_after": int}, "prune --json")
    check(d["dry_run"] is True and d["evicted"] > 0, "dry run evicts nothing: %r" % d)
    check(len(c.entries()) == 130, "prune --dry-run changed the cache")
    cap = 2 * (1 << 20)
    r = c.json("prune", "--max-size", "2M")
    check(r["evicted"] > 0 and r["disk_after"] <= cap, "prune report %r" % r)
    check(disk_bytes(c.db) <= cap, "files on disk %d > cap %d" % (disk_bytes(c.db), cap))
    check(r["disk_before"] >= r["disk_after"], "before/after %r" % r)
    left = c.entries()
    check(0 < len(left) < 130, "%d entries left" % len(left))
    # By age, architecture and kind; by count.
    n80 = sum(1 for e in left.values() if e["arch"] == "sm_80")
    r = c.json("prune", "--older-than", "0s", "--arch", "sm_80")
    check(r["evicted"] == n80, "prune --arch sm_80 evicted %d, wanted %d" % (r["evicted"], n80))
    check(all(e["arch"] != "sm_80" for e in c.entries().values()), "sm_80 entries left")
    r = c.json("prune", "--older-than", "30d")
    check(r["evicted"] == 0, "fresh entries are not 30 days old")
    c.json("prune", "--max-entries", "5")
    check(len(c.entries()) <= 5, "prune --max-entries 5 left %d" % len(c.entries()))
    out, _ = c.run("prune", "--max-size", "1M")
    check("on disk" in out and "iB" in out, "prune human output: %r" % out)
    c.run("prune", "--arch", "sm_90")
    check(not any(e["arch"] == "sm_90" for e in c.entries().values()),
          "prune --arch alone prunes that architecture")


def test_namespaces(root):
    """Entries a caller stored under its own keys: ls, stats and prune by namespace."""
    c = Cache(root)
    c.fill(4, "--size", "1000", "--seed", 20)
    core = c.fill(3, "--namespace", "cuda.core", "--size", "2000", "--seed", 21)
    c.fill(2, "--namespace", "triton", "--size", "500", "--seed", 22)
    listed = c.json("ls", "--namespace", "cuda.core")["entries"]
    check(sorted(e["key"] for e in listed) == sorted(core),
          "ls --namespace cuda.core: %r, wanted %r" % ([e["key"] for e in listed], core))
    check(all(e["kind"] == "data" and e["arch"] == "cuda.core" for e in listed),
          "ls --namespace: kinds and arches %r" % listed)
    check(len(c.json("ls", "--kind", "data")["entries"]) == 5, "ls --kind data")
    out, _ = c.run("ls", "--namespace", "triton")
    check(len(out.splitlines()) == 3 and "triton" in out, "ls --namespace triton:\n" + out)
    s = c.json("stats", "--namespace", "cuda.core")
    check(s["namespace"] == "cuda.core" and s["entries"] == 3 and s["raw_bytes"] == 6000,
          "stats --namespace: %r" % s)
    check(c.json("stats", "--namespace", "nobody")["entries"] == 0, "stats of an empty namespace")
    out, _ = c.run("stats", "--namespace", "triton")
    check("2 entries" in out, "stats --namespace human output: %r" % out)
    # A caller's entry reads back through get like any other.
    check(len(c.get(core[0])) == 2000, "get of a caller's entry")
    # -z with --namespace zeroes that namespace's counters alone.
    c.fill(1, "--namespace", "cuda.core", "--seed", 23, "--hits", 2)
    c.fill(1, "--namespace", "triton", "--seed", 24, "--hits", 3)
    before = (c.json("stats", "--namespace", "cuda.core"), c.json("stats", "--namespace", "triton"))
    check(before[0]["hits"] >= 1 and before[1]["hits"] >= 1, "gets are hits: %s" % (before,))
    out, _ = c.run("stats", "--namespace", "cuda.core", "-z")
    check("zeroed" in out, out)
    after = (c.json("stats", "--namespace", "cuda.core"), c.json("stats", "--namespace", "triton"))
    check(after[0]["hits"] == 0 and after[0]["entries"] == 4, "cuda.core zeroed: %s" % after[0])
    check(after[1] == before[1], "triton untouched: %s %s" % (after[1], before[1]))
    r = c.json("prune", "--namespace", "triton", "--older-than", "0s")
    check(r["evicted"] == 3, "prune --namespace triton evicted %r" % r)
    check(len(c.json("ls")["entries"]) == 8, "prune --namespace touched other entries")
    # Bad names and mixed filters are usage errors.
    for args in (["ls", "--namespace", "bad name"], ["ls", "--namespace", "x", "--arch", "sm_90"],
                 ["stats", "--namespace", "a/b"], ["prune", "--namespace", "a b"]):
        _, err = c.run(*args, rc=2)
        check(err.startswith("kcache: "), "%r: %r" % (args, err))


def test_export_import(root):
    src = Cache(root, "src")
    src.fill(20, "--inputs", "--names", "--size", "3000", "--seed", 7)
    src.fill(5, "--arch", "sm_80", "--kind", "ltoir", "--size", "777", "--seed", 8)
    bundle = os.path.join(root, "warm.kcache")
    r = src.json("export", bundle)
    fields(r, {"path": str, "entries": int, "bytes": int, "damaged": int}, "export --json")
    check(r["entries"] == 25, "exported %d" % r["entries"])
    check(not [f for f in os.listdir(root) if f.startswith("warm.kcache") and f != "warm.kcache"],
          "export left files beside the bundle: %r" % os.listdir(root))
    con = sqlite3.connect(bundle)
    check(con.execute("PRAGMA application_id").fetchone()[0] == 0x4B434348,
          "the bundle is not a kcache database")
    check(con.execute("PRAGMA journal_mode").fetchone()[0] == "delete", "bundle is in WAL mode")
    con.close()

    dst = Cache(root, "dst")
    d = dst.json("import", bundle, "--dry-run")
    fields(d, {"path": str, "dry_run": bool, "entries": int, "bytes": int, "added": int,
               "replaced": int, "skipped": int}, "import --json")
    check(d["added"] == 25, "dry run would add %d" % d["added"])
    check(dst.json("ls")["entries"] == [], "import --dry-run changed the cache")
    d = dst.json("import", bundle)
    check(d["added"] == 25 and d["skipped"] == 0, "import %r" % d)
    want = src.snapshot()
    got = dst.snapshot()
    check(set(got) == set(want), "imported keys differ")
    for key in want:
        check(got[key] == want[key], "entry %s differs after export/import" % key[:16])
    doc = dst.json("inspect", next(iter(src.json("ls", "--kind", "cubin")["entries"]))["key"],
                   "--source")
    check(len(doc["inputs"]) == 2 and doc["names"], "inputs or names lost in the bundle")
    # Again: the entries are as new, nothing changes.
    d = dst.json("import", bundle)
    check(d["added"] == 0 and d["replaced"] == 0 and d["skipped"] == 25, "re-import %r" % d)
    # Filters.
    r = src.json("export", os.path.join(root, "ltoir.kcache"), "--kind", "ltoir")
    check(r["entries"] == 5, "export --kind ltoir wrote %d" % r["entries"])
    r = src.json("export", os.path.join(root, "sm80.kcache"), "--arch", "sm_80", "--since", "1h")
    check(r["entries"] == 5, "export --arch --since wrote %d" % r["entries"])
    out, _ = src.run("export", os.path.join(root, "all2.kcache"))
    check(out.startswith("Exported 25 entries"), "export human output %r" % out)
    # Progress goes to a terminal, and only there; without colour under NO_COLOR.
    master, slave = os.openpty()
    try:
        p = subprocess.run([KCACHE, "export", os.path.join(root, "tty.kcache")], env=src.env,
                           stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL,
                           timeout=60)
        os.set_blocking(master, False)
        try:
            shown = os.read(master, 65536).decode("utf-8", "replace")
        except BlockingIOError:
            shown = ""
    finally:
        os.close(slave)
        os.close(master)
    check(p.returncode == 0 and "exporting" in shown and "25/25" in shown,
          "no progress on a terminal: %r" % shown)
    check("\033[1m" not in shown, "colour despite NO_COLOR")
    _, err = src.run("export", os.path.join(root, "pipe.kcache"))
    check(err == "", "progress written to a pipe: %r" % err)
    src.run("export", rc=2)
    src.run("export", bundle, "--dir", root, rc=2)


def test_export_dir(root):
    c = Cache(root)
    c.fill(4, "--size", "1500", "--names", "--seed", 10)
    c.fill(2, "--arch", "sm_80", "--kind", "ptx", "--size", "100", "--seed", 11)
    out_dir = os.path.join(root, "plain")
    r = c.json("export", "--dir", out_dir)
    check(r["entries"] == 6, "export --dir wrote %d" % r["entries"])
    with open(os.path.join(out_dir, "manifest.json")) as f:
        m = json.load(f)
    check(len(m["entries"]) == 6, "manifest has %d entries" % len(m["entries"]))
    for e in m["entries"]:
        fields(e, {"file": str, "key": str, "kind": str, "arch": str, "name": str, "size": int,
                   "blake2b": str, "created_ms": int, "toolchain": str, "names": list},
               "manifest entry")
        path = os.path.join(out_dir, e["file"])
        check(e["file"].startswith(e["arch"] + "/") and path.endswith("." + e["kind"]),
              "file name %r" % e["file"])
        with open(path, "rb") as f:
            data = f.read()
        check(len(data) == e["size"], "%s: size" % e["file"])
        check(hashlib.blake2b(data, digest_size=32).hexdigest() == e["blake2b"],
              "%s: digest" % e["file"])
        check(data == c.get(e["key"]), "%s: bytes differ from the cache" % e["file"])


def damaged_bundles(root, bundle):
    """(description, path) of bundles damaged in the ways a bundle can be."""
    out = []

    def copy(name):
        p = os.path.join(root, name)
        shutil.copy(bundle, p)
        return p

    p = copy("altered.kcache")
    alter_artifact(p, 3)
    out.append(("an altered artifact", p))
    p = copy("input.kcache")
    con = sqlite3.connect(p)
    con.execute("UPDATE input SET data = zeroblob(length(data)) WHERE id = "
                "(SELECT max(id) FROM input)")
    con.commit()
    con.close()
    out.append(("an altered input", p))
    p = copy("trigger.kcache")
    con = sqlite3.connect(p)
    con.execute("CREATE TRIGGER evil AFTER INSERT ON counter BEGIN DELETE FROM entry; END")
    con.commit()
    con.close()
    out.append(("a foreign trigger", p))
    p = copy("view.kcache")
    con = sqlite3.connect(p)
    con.execute("CREATE VIEW v AS SELECT * FROM entry")
    con.commit()
    con.close()
    out.append(("a foreign view", p))
    p = copy("appid.kcache")
    con = sqlite3.connect(p)
    con.execute("PRAGMA application_id = 1234")
    con.commit()
    con.close()
    out.append(("another application id", p))
    p = copy("schema.kcache")
    con = sqlite3.connect(p)
    con.execute("PRAGMA user_version = 99")
    con.commit()
    con.close()
    out.append(("another schema version", p))
    p = copy("size.kcache")
    con = sqlite3.connect(p)
    con.execute("UPDATE entry SET raw_size = 1 << 40 WHERE id = (SELECT min(id) FROM entry)")
    con.commit()
    con.close()
    out.append(("an absurd size", p))
    p = copy("truncated.kcache")
    with open(p, "r+b") as f:
        f.truncate(os.path.getsize(p) // 2)
    out.append(("a truncated file", p))
    p = os.path.join(root, "garbage.kcache")
    with open(p, "wb") as f:
        f.write(os.urandom(8192))
    out.append(("random bytes", p))
    p = os.path.join(root, "empty.kcache")
    open(p, "wb").close()
    out.append(("an empty file", p))
    return out


def test_import_damaged(root):
    src = Cache(root, "src")
    src.fill(12, "--inputs", "--size", "4000", "--seed", 12)
    bundle = os.path.join(root, "b.kcache")
    src.run("export", bundle)
    dst = Cache(root, "dst")
    dst.fill(5, "--inputs", "--size", "2000", "--seed", 13)
    before = dst.snapshot()
    for what, path in damaged_bundles(root, bundle):
        with open(path, "rb") as f:
            bundle_bytes = f.read()
        _, err = dst.run("import", path, rc=1)
        check(len(err.splitlines()) == 1 and err.startswith("kcache: "),
              "import of %s: stderr %r" % (what, err))
        check("nothing imported" in err or "not a kcache" in err,
              "import of %s does not say nothing was imported: %r" % (what, err))
        dst.run("import", path, "--dry-run", rc=1)
        check(dst.snapshot() == before, "import of a bundle with %s changed the cache" % what)
        with open(path, "rb") as f:
            check(f.read() == bundle_bytes, "import changed the bundle with %s" % what)
    dst.run("import", os.path.join(root, "missing.kcache"), rc=1)
    # The undamaged bundle still imports.
    check(dst.json("import", bundle)["added"] == 12, "the good bundle was refused")


def test_import_keeps_newer(root):
    """The same bytes under a key: the newer entry is kept, whichever side it is on."""
    a = Cache(root, "a")
    keys = a.fill(3, "--seed", 14, "--size", "500")
    old_bundle = os.path.join(root, "old.kcache")
    a.run("export", old_bundle)
    time.sleep(0.01)
    b = Cache(root, "b")
    b.fill(3, "--seed", 14, "--size", "500")  # the same keys and bytes, written later
    d = b.json("import", old_bundle)
    check(d["skipped"] == 3 and d["added"] == 0 and d["conflicts"] == 0,
          "older bundle entries replaced newer: %r" % d)
    new_bundle = os.path.join(root, "new.kcache")
    b.run("export", new_bundle)
    d = a.json("import", new_bundle)
    check(d["replaced"] == 3 and d["conflicts"] == 0,
          "newer bundle entries did not replace older: %r" % d)
    check(a.json("stats")["conflicts"] == 0, "no conflict counted")
    check(all(len(a.get(k)) == 500 for k in keys), "the entries are served")


def test_import_conflicts_keep_local(root):
    """The same keys with other bytes: conflicts, the local entries kept, both digests said."""
    a = Cache(root, "a")
    keys = a.fill(3, "--seed", 14, "--size", "500")
    old_bundle = os.path.join(root, "old.kcache")
    a.run("export", old_bundle)
    ours = {k: a.get(k) for k in keys}
    blob = os.path.join(root, "new.bin")
    with open(blob, "wb") as f:
        f.write(b"newer bytes" * 50)
    b = Cache(root, "b")
    b.fill(3, "--seed", 14, "--data", blob)
    theirs = hashlib.blake2b(b"newer bytes" * 50, digest_size=32).hexdigest()
    new_bundle = os.path.join(root, "new.kcache")
    b.run("export", new_bundle)
    # Newer (b's) or older (a's), an arriving entry never displaces bytes already here.
    for cache, bundle, kept in ((a, new_bundle, None), (b, old_bundle, b"newer bytes" * 50)):
        d = cache.json("import", bundle)
        for k in keys:
            check(cache.get(k) == (kept if kept else ours[k]),
                  "the local entry was not kept: %r" % d)
        check(d["conflicts"] == 3 and d["added"] == 0 and d["replaced"] == 0,
              "a conflict is counted, nothing replaced: %r" % d)
        check(len(d["conflict_list"]) == 3 and
              all(c["key"] in keys and len(c["kept"]) == 64 and len(c["refused"]) == 64
                  and c["kept"] != c["refused"] for c in d["conflict_list"]),
              "each conflict with both digests: %r" % d)
    out, err = b.run("import", old_bundle)
    lines = [l for l in err.splitlines() if "conflict" in l]
    check(len(lines) == 3 and all(theirs in l and l.count("digest") == 2 for l in lines),
          "one line per conflict, with both digests: %r" % err)
    check("3 conflicts" in out, "the summary counts them: %r" % out)
    check(b.json("stats")["conflicts"] == 6, "stats counts them: %r" % b.json("stats"))
    out, _ = b.run("stats")
    check(re.search(r"Conflicts:\s+6", out), "stats shows them: %r" % out)
    d = b.json("import", "--dry-run", old_bundle)
    check(d["conflicts"] == 3 and b.json("stats")["conflicts"] == 6,
          "a dry run says them, counts nothing: %r" % d)


def test_verify(root):
    c = Cache(root)
    keys = c.fill(8, "--inputs", "--size", "5000", "--seed", 15)
    v = c.json("verify")
    fields(v, {"ok": bool, "integrity_ok": bool, "integrity": str, "entries": int,
               "damaged_entries": int, "bytes": int, "damaged": list}, "verify --json")
    check(v["ok"] and v["entries"] == 8 and v["damaged_entries"] == 0, "fresh verify %r" % v)
    out, _ = c.run("verify")
    check("Damaged entries:  0" in out, "verify human output %r" % out)
    alter_artifact(c.db, 2)
    v = c.json("verify", rc=1)
    check(not v["ok"] and v["damaged_entries"] == 1, "verify after damage %r" % v)
    check(v["damaged"][0]["key"] in keys, "damaged key %r" % v["damaged"])
    v_damaged_key = v["damaged"][0]["key"]
    _, err = c.run("verify", rc=1)
    check("damaged" in err, "verify does not name the damage: %r" % err)
    check(c.json("stats")["hits"] == 0, "verify counted hits")
    check("verify --fix" in err and "store is read-only" not in err,
          "the fix is named, and nothing untrue said of a writable cache: %r" % err)
    # --fix deletes the damaged entry and nothing else, counted in stats.
    out, _ = c.run("verify", "--fix")
    check(re.search(r"^Damaged entries:  1 \(deleted\)$", out, re.M), out)
    bad = v_damaged_key
    v = c.json("verify")
    check(v["ok"] and v["entries"] == 7 and v["damaged_entries"] == 0, "after --fix %r" % v)
    check(sorted(c.entries()) == sorted(k for k in keys if k != bad),
          "only the damaged entry went: %s" % c.entries())
    check(c.json("stats")["corrupt"] == 1, "counted: %s" % c.json("stats"))


def test_config(root):
    c = Cache(root)
    doc = c.json("config")
    fields(doc, {"config_file": str, "settings": list}, "config --json")
    names = [s["name"] for s in doc["settings"]]
    for n in ("dir", "path", "max_size", "busy_timeout", "disable"):
        check(n in names, "config does not list %s" % n)
    for s in doc["settings"]:
        fields(s, {"name": str, "value": str, "source": str, "origin": str, "env": str,
                   "description": str}, "config setting")
    by = {s["name"]: s for s in doc["settings"]}
    check(by["dir"]["source"] == "environment" and by["dir"]["value"] == c.dir, "dir %r" % by)
    check(by["max_size"]["source"] == "default", "max_size %r" % by["max_size"])
    c.run("config", "max_size", "1.5GiB")
    with open(os.path.join(c.dir, "kcache.conf")) as f:
        check("max_size = 1.5GiB" in f.read(), "config file not written")
    s = c.json("config", "max_size")
    # Sizes print one way whatever set them; as_written keeps the text.
    check(s["value"] == "1.50 GiB" and s["as_written"] == "1.5GiB" and s["source"] == "file",
          "after set: %r" % s)
    out, _ = c.run("config", "max_size")
    check(out.strip() == "1.50 GiB", "config KEY prints %r" % out)
    s = c.json("config", "max_size", env={"KCACHE_MAX_SIZE": "3G"})
    check(s["value"] == "3.00 GiB" and s["source"] == "environment", "env does not win: %r" % s)
    s = c.json("--max-size", "1G", "config", "max_size", env={"KCACHE_MAX_SIZE": "3G"})
    check(s["source"] == "flag" and s["bytes"] == GiB, "flag does not win: %r" % s)
    c.run("config", "busy_timeout", "250")
    c.run("config", "disable", "true")
    by = {s["name"]: s for s in c.json("config")["settings"]}
    check(by["busy_timeout"]["value"] == "250" and by["disable"]["value"] == "true", "%r" % by)
    _, err = c.run("config", "max_size", "huge", rc=2)
    check(err.startswith("kcache: ") and "max_size" in err, "bad value: %r" % err)
    c.run("config", "no_such", rc=2)
    c.run("config", "path", "/tmp/x", rc=2)
    c.run("config", "--unset", "disable")
    by = {s["name"]: s for s in c.json("config")["settings"]}
    check(by["disable"]["source"] == "default", "--unset left %r" % by["disable"])
    check(by["max_size"]["as_written"] == "1.5GiB", "--unset removed another setting")
    # A broken file is named with its line.
    with open(os.path.join(c.dir, "kcache.conf"), "a") as f:
        f.write("this is not a setting\n")
    _, err = c.run("config", rc=2)
    check("kcache.conf:" in err, "broken config file: %r" % err)
    # Every verb that uses the cache stops there too, not only config.
    _, err = c.run("stats", rc=2)
    check("kcache.conf:" in err, "stats with a broken config file: %r" % err)


def test_compression(root):
    """The compression setting through the CLI: set, shown, used for what is written
    from then on, every entry readable whatever it is now; bad values named."""
    c = Cache(root)
    s = c.json("config", "compression")
    check(s["value"] == "lz4" and s["source"] == "default", "default compression %r" % s)
    written = {}
    for seed, setting in enumerate(("zstd", "lz4", "none")):
        c.run("config", "compression", setting)
        check(c.json("config", "compression")["value"] == setting, "not set to %s" % setting)
        written[setting] = c.fill(4, "--size", "30000", "--seed", 40 + seed)
    ents = c.entries()
    check(len(ents) == 12, "entries %d" % len(ents))
    stored = {k: sum(ents[key]["stored_size"] for key in keys) for k, keys in written.items()}
    check(stored["zstd"] < stored["lz4"] < stored["none"] == 4 * 30000,
          "stored bytes by setting %r" % stored)
    s = c.json("stats")
    check(s["entries"] == 12 and s["raw_bytes"] == 12 * 30000 and
          s["stored_bytes"] == sum(stored.values()), "stats across codecs %r" % s)
    for setting in ("zstd", "lz4", "none"):
        for key in written[setting]:
            check(len(c.get(key)) == 30000, "%s entry %s not readable" % (setting, key[:8]))
    v = c.json("verify")
    check(v["entries"] == 12 and v["damaged_entries"] == 0, "verify %r" % v)
    _, err = c.run("config", "compression", "gzip", rc=2)
    check(err.startswith("kcache: ") and "zstd, lz4 or none" in err and "\n" not in err.strip(),
          "bad value: %r" % err)
    _, err = c.run("stats", rc=2, env={"KCACHE_COMPRESSION": "fast"})
    check("KCACHE_COMPRESSION=fast" in err and "zstd, lz4 or none" in err, "bad env: %r" % err)


def test_clear_and_vacuum(root):
    c = Cache(root)
    c.fill(30, "--size", "20000", "--seed", 16)
    v = c.json("vacuum")
    fields(v, {"disk_before": int, "disk_after": int}, "vacuum --json")
    check(len(c.entries()) == 30, "vacuum lost entries")
    r = c.json("clear")
    fields(r, {"removed": int, "disk_before": int, "disk_after": int}, "clear --json")
    check(r["removed"] == 30 and r["disk_after"] < r["disk_before"], "clear %r" % r)
    check(c.entries() == {}, "clear left entries")
    out, _ = c.run("vacuum")
    check("On disk:" in out, "vacuum human output %r" % out)


def test_foreign_database(root):
    c = Cache(root)
    os.makedirs(c.dir)
    con = sqlite3.connect(c.db)
    con.execute("CREATE TABLE notes (t TEXT)")
    con.commit()
    con.close()
    with open(c.db, "rb") as f:
        data = f.read()
    for verb in ("ls", "stats", "verify", "prune", "clear"):
        _, err = c.run(verb, rc=1)
        check(err.startswith("kcache: ") and "another application" in err,
              "%s on a foreign database: %r" % (verb, err))
    with open(c.db, "rb") as f:
        check(f.read() == data, "kcache changed another application's database")


def run_tests(namespace):
    """Runs every test_* of namespace (or those named on the command line)."""
    return kctest.run_tests(namespace, ONLY, prefix="kcache-cli-")


def main():
    return run_tests(globals())


if __name__ == "__main__":
    sys.exit(main())

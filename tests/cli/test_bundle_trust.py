#!/usr/bin/env python3
"""Bundles across a trust boundary, through the real kcache: signatures
(export --sign, import --require-signature, import_require_signature, a
bundle changed after signing, another secret) and conflicts settled by a
rebuild (import --resolve-conflicts, with the real NVRTC; those skip without
a toolkit). Every refusal is one line and changes nothing.

Usage: test_bundle_trust.py KCACHE KCACHE_FILL [TEST-NAME...]
"""
import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_cli as base  # noqa: E402  (the same harness, same arguments)
from kctest import Cache, check  # noqa: E402  (on the path test_cli set)

SECRET = {"KCACHE_REMOTE_SECRET": "fleet-secret"}
OTHER = {"KCACHE_REMOTE_SECRET": "not-the-secret"}


def signed_bundle(root, name="signed.kcache"):
    src = Cache(root, "src-" + name)
    keys = src.fill(6, "--seed", 31, "--inputs", "--names", "--size", "3000")
    path = os.path.join(root, name)
    d = src.json("export", path, "--sign", env=SECRET)
    check(d["signed"] and d["entries"] == 6, "export --sign with the secret: %r" % d)
    return path, keys


def refused(cache, args, env, says):
    """An import refused in one line that says `says`, with nothing merged."""
    out, err = cache.run("import", *args, rc=1, env=env)
    lines = [l for l in err.splitlines() if l.strip()]
    check(len(lines) == 1 and says in lines[0] and "nothing imported" in lines[0],
          "one line saying %r: %r" % (says, err))
    check(not os.path.exists(cache.db) or len(cache.entries()) == 0,
          "a refused bundle changed the cache")


def test_signed_round_trip(root):
    path, keys = signed_bundle(root)
    dst = Cache(root, "dst")
    d = dst.json("import", path, "--require-signature", env=SECRET)
    check(d["signed"] and d["added"] == 6, "a signed bundle imports: %r" % d)
    out, _ = Cache(root, "dst2").run("import", path, env=SECRET)
    check("signature checked" in out, "the summary says the signature was checked: %r" % out)
    # Without the secret the signature cannot be checked: as unsigned, unless required.
    d = Cache(root, "nosecret").json("import", path)
    check(not d["signed"] and d["added"] == 6, "imported as unsigned: %r" % d)
    refused(Cache(root, "nosecret2"), [path, "--require-signature"], None,
            "remote_secret is not set")


def test_changed_after_signing(root):
    path, keys = signed_bundle(root)
    # A log is also covered by its entry's own check (the names' tail): read as damage first.
    changes = [
        ("UPDATE entry_info SET log = 'not what was signed' WHERE id = (SELECT min(id) FROM entry)",
         "is damaged"),
        ("UPDATE entry SET name = 'other.cu' WHERE id = (SELECT max(id) FROM entry)", None),
        ("UPDATE entry SET created_at = created_at - 1000 WHERE id = (SELECT min(id) FROM entry)",
         None),
        ("DELETE FROM entry WHERE id = (SELECT max(id) FROM entry)", None),
        ("UPDATE counter SET value = zeroblob(32) WHERE name = 'bundle_signature_v1'", None),
    ]
    for i, (sql, says) in enumerate(changes):
        copy = os.path.join(root, "changed%d.kcache" % i)
        shutil.copy(path, copy)
        con = sqlite3.connect(copy)
        con.executescript(sql)
        con.commit()
        con.close()
        refused(Cache(root, "c%d" % i), [copy], SECRET, says or "signature does not match")
    # Another fleet's secret.
    refused(Cache(root, "other"), [path], OTHER, "signature does not match")


def test_unsigned(root):
    src = Cache(root, "src")
    src.fill(3, "--seed", 32)
    path = os.path.join(root, "plain.kcache")
    d = src.json("export", path)
    check(not d["signed"], "no secret, no signature: %r" % d)
    # Unsigned bundles keep working unless a signature is required.
    check(Cache(root, "a").json("import", path, env=SECRET)["added"] == 3, "unsigned imports")
    refused(Cache(root, "b"), [path, "--require-signature"], SECRET, "is not signed")
    c = Cache(root, "c")
    c.run("config", "import_require_signature", "true")
    refused(c, [path], SECRET, "is not signed")
    # A signature row removed is an unsigned bundle.
    signed, _ = signed_bundle(root, "unsigned-later.kcache")
    con = sqlite3.connect(signed)
    con.execute("DELETE FROM counter WHERE name = 'bundle_signature_v1'")
    con.commit()
    con.close()
    refused(Cache(root, "d"), [signed, "--require-signature"], SECRET, "is not signed")
    # export --sign without a secret writes nothing.
    nothing = os.path.join(root, "nothing.kcache")
    _, err = src.run("export", nothing, "--sign", rc=1)
    check("remote_secret" in err and len(err.strip().splitlines()) == 1, err)
    check(not os.path.exists(nothing), "export --sign without a secret wrote a file")
    src.run("export", "--dir", os.path.join(root, "d"), "--sign", rc=2)


# ---- conflicts settled by a rebuild (the real NVRTC) --------------------------------------

K19 = 'extern "C" __global__ void k(float *p) { p[0] = 19.0f; }\n'
K20 = 'extern "C" __global__ void k(float *p) { p[0] = 20.0f; }\n'


def compile_key(cache, root, name, text):
    src = os.path.join(root, name)
    with open(src, "w") as f:
        f.write(text)
    d = cache.json("compile", src, "--arch", "sm_90")
    return d["items"][0]["key"]


def poisoned(root, good_bundle, k19, k20, with_source=False):
    """good_bundle with k20's row carrying k19's artifact, every digest consistent, and
    with_source, k19's source kept as k20's too (so that a rebuild from it agrees)."""
    path = os.path.join(root, "poison%d.kcache" % with_source)
    shutil.copy(good_bundle, path)
    con = sqlite3.connect(path)
    if with_source:
        con.execute("UPDATE entry_input SET input_id = (SELECT ei.input_id FROM entry_input ei"
                    " JOIN entry e ON e.id = ei.entry_id WHERE e.key = ? AND ei.role = 1)"
                    " WHERE role = 1 AND entry_id = (SELECT id FROM entry WHERE key = ?)",
                    (bytes.fromhex(k19), bytes.fromhex(k20)))
    con.execute("UPDATE artifact SET (stored_digest, data) = (SELECT a.stored_digest, a.data"
                " FROM artifact a JOIN entry e ON e.id = a.id WHERE e.key = ?)"
                " WHERE id = (SELECT id FROM entry WHERE key = ?)",
                (bytes.fromhex(k19), bytes.fromhex(k20)))
    con.execute("UPDATE entry SET (raw_size, stored_size, codec, digest) = (SELECT raw_size,"
                " stored_size, codec, digest FROM entry WHERE key = ?) WHERE key = ?",
                (bytes.fromhex(k19), bytes.fromhex(k20)))
    con.commit()
    con.close()
    return path


def can_compile(root):
    probe = os.path.join(root, "probe.cu")
    with open(probe, "w") as f:
        f.write(K19)
    p = subprocess.run([base.KCACHE, "compile", probe, "--arch", "sm_90", "--no-cache", "-q"],
                       capture_output=True, env=dict(os.environ, KCACHE_DIR=root + "/probe"))
    return p.returncode == 0


def test_resolve_conflicts(root):
    if not can_compile(root):
        print("     skipped: kcache cannot compile here")
        return
    a = Cache(root, "a")
    k19 = compile_key(a, root, "k19.cu", K19)
    k20 = compile_key(a, root, "k20.cu", K20)
    good = a.get(k20)
    good_bundle = os.path.join(root, "good.kcache")
    a.run("export", good_bundle)
    poison = poisoned(root, good_bundle, k19, k20)
    # The poison got in first (into an empty cache nothing can tell); a good bundle
    # does not displace it, being a conflict...
    c = Cache(root, "c")
    c.run("import", poison)
    check(c.get(k20) == a.get(k19), "the poisoned entry is in")
    d = c.json("import", good_bundle)
    check(d["conflicts"] == 1 and c.get(k20) == a.get(k19), "a conflict keeps the local: %r" % d)
    # ... until a rebuild says which is right.
    d = c.json("import", good_bundle, "--resolve-conflicts")
    (x,) = d["conflict_list"]
    check(x["key"] == k20 and x["outcome"].startswith("replaced"), "resolved: %r" % d)
    check(c.get(k20) == good, "the rebuild put the good bytes back")
    # The other way round: the cache is right, the bundle is not.
    d = a.json("import", poison, "--resolve-conflicts")
    (x,) = d["conflict_list"]
    check(x["outcome"].startswith("kept: a rebuild gives the cache's"), "kept: %r" % d)
    check(a.get(k20) == good, "the good entry stays")
    out, _ = a.run("import", poison, "--resolve-conflicts")
    check(k20 in out and "kept" in out, "the summary says what each rebuild settled: %r" % out)
    a.run("import", poison, "--resolve-conflicts", "--dry-run", rc=2)
    # A poison that brings the other kernel's source too: a rebuild from it would agree
    # with it. Inputs that are not the ones the key names are no evidence: the bundle's
    # own are used, and the good bytes come back.
    poison2 = poisoned(root, good_bundle, k19, k20, with_source=True)
    e = Cache(root, "e")
    e.run("import", poison2)
    check(e.get(k20) == a.get(k19), "the poisoned entry and its source are in")
    d = e.json("import", good_bundle, "--resolve-conflicts")
    (x,) = d["conflict_list"]
    check(x["outcome"].startswith("replaced") and e.get(k20) == good,
          "a rebuild from another kernel's source settled it: %r" % d)
    _, err = e.run("verify", "--recompile", rc=0)


def main():
    return base.run_tests(globals())


if __name__ == "__main__":
    sys.exit(main())

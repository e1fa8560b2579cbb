#!/usr/bin/env python3
"""The verbs that need no compiler: an honest, friendly CLI.

Usage: test_cli_honest.py KCACHE KCACHE_FILL [TEST-NAME...]

Read-only verbs create nothing; a cap of 0/none/unlimited means no cap and
sizes print one way whatever set them; --dir exists; the config table keeps
its columns; import says when the cap evicted what it added; prune --dry-run
estimates the size after; counts are spelled with the right plural.
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_cli as base  # noqa: E402  (the same harness, same arguments)
from kctest import Cache, check  # noqa: E402  (on the path test_cli set)


def tree(path):
    """Every file under path (nothing when it does not exist)."""
    found = []
    for dirpath, dirs, files in os.walk(path):
        found += [os.path.join(dirpath, f) for f in files] + [os.path.join(dirpath, d) for d in dirs]
    return sorted(found)


def test_read_only_verbs_create_nothing(root):
    c = Cache(root)
    check(not os.path.exists(c.dir), "the test starts without a cache directory")
    out, err = c.run("ls")
    check("no cache yet at " + c.db in err, "ls says there is no cache: %r" % err)
    check(c.json("ls") == {"entries": []}, "ls --json: empty")
    out, err = c.run("stats")
    check("no cache yet at " + c.db in (out + err).lower(),
          "stats says there is no cache: %r" % (out + err))
    st = c.json("stats")
    check(st["entries"] == 0 and st["exists"] is False, "stats --json: %s" % st)
    out, err = c.run("verify")
    check("no cache yet" in err, "verify: %r" % err)
    c.run("path")
    c.run("config")
    c.run("config", "max_size")
    _, err = c.run("inspect", "abcd", rc=1)
    check("no cache yet at " + c.db in err, "inspect: %r" % err)
    _, err = c.run("get", "abcd", "-o", os.path.join(root, "x.bin"), rc=1)
    check("no cache yet at " + c.db in err, "get: %r" % err)
    _, err = c.run("export", os.path.join(root, "out.kcache"), rc=1)
    check("no cache yet at " + c.db in err, "export: %r" % err)
    check(not os.path.exists(os.path.join(root, "out.kcache")), "export wrote no bundle")
    check(not os.path.exists(c.dir), "read-only verbs created %s" % tree(c.dir))
    # Nor do the verbs that would only remove: there is nothing to remove.
    for verb in ("clear", "vacuum", "prune"):
        _, err = c.run(verb)
        check("no cache yet at " + c.db in err, "%s: %r" % (verb, err))
        json.loads(c.run(verb, "--json")[0])
    check(not os.path.exists(c.dir), "clear/vacuum/prune created %s" % tree(c.dir))


def test_zero_means_no_cap(root):
    c = Cache(root)
    c.fill(3)
    for word in ("0", "none", "unlimited"):
        out, _ = c.run("config", "max_size", word)
        check(c.json("stats")["max_size"] is None, "config max_size %s: no cap" % word)
        check(c.run("config", "max_size")[0].strip() == "none", "shown as none")
        c.run("config", "--unset", "max_size")
        check(c.json("stats", env={"KCACHE_MAX_SIZE": word})["max_size"] is None,
              "KCACHE_MAX_SIZE=%s: no cap" % word)
        check(c.json("--max-size", word, "stats")["max_size"] is None,
              "--max-size %s: no cap" % word)
        r = c.json("prune", "--max-size", word)
        check(r["evicted"] == 0, "prune --max-size %s evicts nothing: %s" % (word, r))
    out, _ = c.run("stats", env={"KCACHE_MAX_SIZE": "none"})
    check(re.search(r"^Cap:\s+none", out, re.M), "stats shows no cap: %s" % out)
    _, err = c.run("--max-size", "-1", "stats", rc=2)
    check("0 or none" in err, "a bad size says how to turn the cap off: %r" % err)


def test_one_printing_of_sizes(root):
    c = Cache(root)
    c.fill(1)
    flag, _ = c.run("--max-size", "2G", "config", "max_size")
    env, _ = c.run("config", "max_size", env={"KCACHE_MAX_SIZE": "2048M"})
    c.run("config", "max_size", "2147483648B")
    conf, _ = c.run("config", "max_size")
    check(flag == env == conf == "2.00 GiB\n", "one form: %r %r %r" % (flag, env, conf))
    table, _ = c.run("--max-size", "2G", "config")
    check(re.search(r"^max_size\s+2\.00 GiB\s+flag", table, re.M), table)
    stats, _ = c.run("--max-size", "2G", "stats")
    check("2.00 GiB" in stats, "stats prints the cap the same way: %s" % stats)


def test_dir_option(root):
    c = Cache(root)
    other = os.path.join(root, "elsewhere")
    out, _ = c.run("--dir", other, "path")
    check(out.strip() == os.path.join(other, "kcache.db"), "--dir sets the directory: %r" % out)
    _, err = c.run("config", "dir", "/x", rc=2)
    check("--dir" in err, "config dir says to use --dir: %r" % err)
    c.run("--dir", other, "config", "max_size", "1G")
    check(os.path.exists(os.path.join(other, "kcache.conf")), "the config went to --dir")
    table, _ = c.run("--dir", other, "config")
    check(re.search(r"^dir\s+\S+\s+flag\s+--dir", table, re.M), table)
    out, _ = c.run("--help")
    check("--dir DIR" in out, "--help lists --dir")


def test_config_table_keeps_columns(root):
    long_dir = os.path.join(root, "a-rather-long-directory-name-" * 4, "kcache")
    c = Cache(root)
    c.env["KCACHE_DIR"] = long_dir
    table, _ = c.run("config")
    lines = table.splitlines()
    rows = [l for l in lines if l.split() and l.split()[0] in
            ("dir", "path", "max_size", "busy_timeout", "disable")]
    check(len(rows) == 5, "five rows: %s" % table)
    from_col = lines[0].index("FROM")
    for row in rows:
        check(len(row) <= 100, "a row within 100 columns: %r" % row)
        check(row[from_col - 1] == " " and row[from_col] != " ",
              "the FROM column stays aligned: %r" % row)
    one, _ = c.run("config", "dir")
    check(one.strip() == long_dir, "config KEY shows the whole value")


def test_import_says_what_the_cap_evicted(root):
    src = Cache(root, "src")
    src.fill(40, "--size", 65536)
    bundle = os.path.join(root, "b.kcache")
    src.run("export", bundle)
    dst = Cache(root, "dst")
    dst.fill(1, "--seed", 9)
    out, err = dst.run("import", bundle, env={"KCACHE_MAX_SIZE": "1M"})
    kept = len(dst.entries())
    check(kept < 40, "the cap evicted something (%d kept)" % kept)
    check("cap" in err and "evicted" in err, "import says the cap evicted: %r" % err)
    check(re.search(r"\b%d of the 40\b" % (40 - min(40, kept)), err) or "of the 40" in err,
          "import says how many of its entries are gone: %r" % err)
    r = dst.json("import", bundle, env={"KCACHE_MAX_SIZE": "1M"})
    check("evicted" in r and r["evicted"] > 0, "import --json has evicted: %s" % r)


def test_prune_dry_run_estimates(root):
    c = Cache(root)
    c.fill(30, "--size", 32768)
    r = c.json("prune", "--dry-run", "--max-entries", "5")
    check(r["evicted"] == 25, "would evict 25: %s" % r)
    check(r["disk_after"] < r["disk_before"], "the estimate is smaller than now: %s" % r)
    out, _ = c.run("prune", "--dry-run", "--max-entries", "5")
    check("about" in out or "estimate" in out, "the human line says it estimates: %r" % out)


def test_plurals(root):
    c = Cache(root)
    c.fill(1)
    bundle = os.path.join(root, "one.kcache")
    out, _ = c.run("export", bundle)
    check("Exported 1 entry " in out, out)
    out, _ = c.run("import", bundle)
    check("1 entry " in out and "1 already as new" not in out, out)
    out, _ = c.run("prune", "--max-entries", "0", "--dry-run")
    out, _ = c.run("clear")
    check("Removed 1 entry;" in out, out)
    out, _ = c.run("stats")
    check("0.0 us" not in out, "no time saved reads as 0, not 0.0 us: %s" % out)
    for verb in ("ls", "stats", "config", "path", "verify"):
        for args in ((verb,), (verb, "--json")):
            out, err = c.run(*args)
            for text in (out, err):
                bad = re.search(r"\b1 (entries|kernels|files|items|keys|bytes)\b", text)
                check(not bad, "kcache %s: %r" % (" ".join(args), bad and bad.group(0)))


def test_json_valid_utf8(root):
    c = Cache(root)
    weird = os.path.join(root, "caf\xe9-\udcff")  # a name that is not UTF-8 on disk
    os.makedirs(os.fsencode(os.path.join(root, "x")), exist_ok=True)
    raw = os.fsencode(weird)
    os.makedirs(raw, exist_ok=True)
    p = base.subprocess.run([base.KCACHE, "--dir", raw, "path", "--json"],
                            capture_output=True, env=c.env)
    check(p.returncode == 0, "path --json: %s" % p.stderr)
    try:
        json.loads(p.stdout.decode("utf-8", "strict"))
    except (UnicodeDecodeError, ValueError) as ex:
        check(False, "path --json is not valid UTF-8 JSON: %s: %r" % (ex, p.stdout))


def test_output_into_a_fifo(root):
    """-o into a device or a pipe writes into it: a rename would replace it
    (as root, 'kcache get KEY -o /dev/null' replaced /dev/null itself)."""
    import stat
    c = Cache(root)
    key = c.fill(1)[0]
    want = c.get(key)
    fifo = os.path.join(root, "pipe")
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader first, so the writer can open
    try:
        c.run("get", key, "-o", fifo)
        got = b""
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            got += chunk
    finally:
        os.close(fd)
    check(stat.S_ISFIFO(os.stat(fifo).st_mode), "the FIFO is still a FIFO")
    check(got == want, "the artifact went down the pipe (%d of %d bytes)" % (len(got), len(want)))


def main():
    return base.run_tests(globals())


if __name__ == "__main__":
    sys.exit(main())

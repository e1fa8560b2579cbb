#!/usr/bin/env python3
"""Every number kcache reads goes through one parser: one grammar, range-checked.

Usage: test_numbers.py KCACHE KCACHE_FILL [TEST-NAME...]

Each option and setting that takes a size, a count, an age or a time is fed
-1, 2^63, 2^64-1, 10^20, 1e99, nan and 0x10: each is either refused as a
usage error (exit 2, the value named) or read as the number it is; none
empties the cache (prune --max-entries 2^64-1 once evicted everything). A
bare size is GiB on the command line, in the file and in the environment.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_cli as base  # noqa: E402  (the same harness, same arguments)
from kctest import Cache, check  # noqa: E402  (on the path test_cli set)

GiB = 1 << 30
HOSTILE = ["-1", str(1 << 63), str((1 << 64) - 1), "99999999999999999999", "1e99", "nan",
           "0x10"]

# (how the value is given, the values read as numbers: every other one is refused)
OPTIONS = [
    (lambda v: ["prune", "--max-entries", v], {str(1 << 63), str((1 << 64) - 1)}),
    (lambda v: ["prune", "--max-size", v], set()),
    (lambda v: ["prune", "--older-than", v], set()),
    (lambda v: ["--max-size", v, "stats"], set()),
    (lambda v: ["ls", "--limit", v], {str(1 << 63), str((1 << 64) - 1)}),
    (lambda v: ["remote", "push", "--since", v], set()),
    (lambda v: ["export", "--dir", "OUT", "--since", v], set()),
    (lambda v: ["recompress", "--batch", v, "--dry-run"], set()),
    (lambda v: ["compile", "-j", v, "k.cu"], set()),
    (lambda v: ["verify", "--recompile=" + v], {str(1 << 63), str((1 << 64) - 1)}),
    (lambda v: ["config", "max_size", v], set()),
    (lambda v: ["config", "busy_timeout", v], set()),
    (lambda v: ["config", "remote_timeout", v], set()),
    (lambda v: ["config", "remote_connect_timeout", v], set()),
    (lambda v: ["-M", v], set()),
    (lambda v: ["-o", "max_size=" + v], set()),
]
ENVIRONMENT = ["KCACHE_MAX_SIZE", "KCACHE_BUSY_TIMEOUT", "KCACHE_REMOTE_TIMEOUT",
               "KCACHE_REMOTE_CONNECT_TIMEOUT"]


def test_hostile_numbers(root):
    c = Cache(root)
    keys = set(c.fill(3))
    out_dir = os.path.join(root, "out")
    for make, accepted in OPTIONS:
        for v in HOSTILE:
            args = [out_dir if a == "OUT" else a for a in make(v)]
            want = 0 if v in accepted else 2
            _, err = c.run(*args, rc=None if want == 0 else 2)
            if want == 2:
                check(v in err, "kcache %s names the value: %r" % (" ".join(args), err))
            check(set(c.entries()) == keys, "kcache %s kept every entry" % " ".join(args))
            check(not os.path.exists(os.path.join(c.dir, "kcache.conf")),
                  "kcache %s wrote no setting" % " ".join(args))
    for name in ENVIRONMENT:
        for v in HOSTILE:
            _, err = c.run("stats", rc=2, env={name: v})
            check(name in err and v in err, "%s=%s is named: %r" % (name, v, err))
    r = c.json("prune", "--max-entries", str((1 << 64) - 1))
    check(r["evicted"] == 0, "prune --max-entries 2^64-1 keeps everything: %s" % r)
    check(set(c.entries()) == keys, "every entry is still there")


def test_bare_size_is_gib_everywhere(root):
    c = Cache(root)
    c.fill(3)
    c.run("-M", "5")
    check(c.json("stats")["max_size"] == 5 * GiB, "-M 5 is 5 GiB")
    c.run("config", "max_size", "6")
    check(c.json("stats")["max_size"] == 6 * GiB, "config max_size 6 is 6 GiB")
    check(c.json("stats", env={"KCACHE_MAX_SIZE": "10"})["max_size"] == 10 * GiB,
          "KCACHE_MAX_SIZE=10 is 10 GiB")
    check(c.json("--max-size", "7", "stats")["max_size"] == 7 * GiB, "--max-size 7 is 7 GiB")
    check(c.json("--max-size", "1.5", "stats")["max_size"] == 3 * GiB // 2, "1.5 is 1.5 GiB")
    check(c.json("--max-size", "4096B", "stats")["max_size"] == 4096, "4096B is bytes")
    c.run("compile", "--help", env={"KCACHE_MAX_SIZE": "10"})
    check(len(c.entries()) == 3, "KCACHE_MAX_SIZE=10 evicts nothing")


def test_negative_value_named(root):
    c = Cache(root)
    for args in (["config", "max_size", "-5G"], ["-M", "-1"]):
        _, err = c.run(*args, rc=2)
        v = args[-1]
        check("max_size: '%s' is not a size" % v in err, "%s: %r" % (" ".join(args), err))


def main():
    return base.run_tests(globals())


if __name__ == "__main__":
    sys.exit(main())

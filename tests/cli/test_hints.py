#!/usr/bin/env python3
"""Messages that point at the fix: a mistyped verb, the two version commands.

Usage: test_hints.py KCACHE KCACHE_FILL [TEST-NAME...]

Each test is a row of what a new user tripped over in the third round
(issue 38): what they typed, and the words that must come back.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_cli as base  # noqa: E402  (the same harness, same arguments)
from kctest import Cache, check  # noqa: E402  (on the path test_cli set)


def test_mistyped_verb_names_the_nearest(root):
    """kcache list, stat, compil: the verb meant, named; exit 2."""
    c = Cache(root)
    for typed, meant in (("list", "ls"), ("stat", "stats"), ("compil", "compile"),
                         ("status", "stats"), ("verfy", "verify"), ("Stats", "stats"),
                         ("rm", "clear"), ("show", "inspect")):
        _, err = c.run(typed, rc=2)
        check("no verb '%s'" % typed in err and "did you mean '%s'?" % meant in err,
              "%s: %r" % (typed, err))
        _, err = c.run("help", typed, rc=2)
        check("did you mean '%s'?" % meant in err, "help %s: %r" % (typed, err))
    _, err = c.run("frobnicate", rc=2)
    check("did you mean" not in err and "kcache --help" in err,
          "nothing near: the verbs' list is named instead: %r" % err)


def test_version_spellings_agree(root):
    """--version, -V and version print one line, the same."""
    c = Cache(root)
    a = c.run("--version")[0]
    b = c.run("version")[0]
    v = c.run("-V")[0]
    check(a == b == v and a.count("\n") == 1, "%r %r %r" % (a, b, v))


def main():
    return base.run_tests(globals())


if __name__ == "__main__":
    sys.exit(main())

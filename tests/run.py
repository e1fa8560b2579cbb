#!/usr/bin/env python3
"""Runs `meson test` on a build directory, then says why each skipped test skipped.

usage: tests/run.py BUILDDIR [MESON-TEST-ARGS...]

Runs `meson test -C BUILDDIR --print-errorlogs MESON-TEST-ARGS` as it is
(its console output, its exit status), then prints one line per skipped
test with the reason the test gave, and "N passed, N failed[, N skipped]".
meson prints only "exit status 77" for a skip; a test says why on its
output ("skip: no redis-server ..."), which meson keeps in
BUILDDIR/meson-logs/testlog*.json. TAP is no way round this: meson 1.0
prints nothing at all for `1..0 # SKIP reason`, and later versions print a
TAP reason only under --verbose. The README's test command and .ci/run are
this script, so a user and CI see the same reasons.
"""
import glob
import json
import os
import re
import subprocess
import sys
import time

# A test's own words for a skip: "skip: ...", "skipped: ...", "SKIP: ...",
# "skip test_name: ..." (tests/pyhelp/kctest.py).
SAID_SKIP = re.compile(r"^\s*skip(ped)?\b:?\s*", re.I)


def reasons(result):
    """The lines in which a skipped test said why, at most three; else its last line."""
    lines = [l.strip() for l in ((result.get("stdout") or "") + "\n" +
                                 (result.get("stderr") or "")).splitlines() if l.strip()]
    said = []
    for line in lines:
        m = SAID_SKIP.match(line)
        if m and line[m.end():] and line[m.end():] not in said:
            said.append(line[m.end():])
    if not said:
        said = lines[-1:] or ["no reason given"]
    return [l[:200] for l in said[:3]]


def newest_log(builddir, since):
    """The testlog*.json meson wrote for this run (its name depends on --setup), or None."""
    logs = [p for p in glob.glob(os.path.join(builddir, "meson-logs", "testlog*.json"))
            if os.path.getmtime(p) >= since]
    return max(logs, key=os.path.getmtime) if logs else None


def main():
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        print(__doc__.strip())
        return 2
    builddir = sys.argv[1]
    since = time.time() - 1
    status = subprocess.call(["meson", "test", "-C", builddir, "--print-errorlogs"] +
                             sys.argv[2:])
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    log = newest_log(builddir, since)
    if log is None:
        print("tests/run.py: meson wrote no test log in %s/meson-logs: see the output above"
              % builddir)
        return status or 1
    with open(log, encoding="utf-8", errors="replace") as f:
        for line in f:
            t = json.loads(line)
            r = t.get("result")
            if r in ("OK", "EXPECTEDFAIL"):
                counts["passed"] += 1
            elif r == "SKIP":
                counts["skipped"] += 1
                for why in reasons(t):
                    print("skipped: %s: %s" % (t.get("name"), why))
            else:
                counts["failed"] += 1
    summary = "%d passed, %d failed" % (counts["passed"], counts["failed"])
    if counts["skipped"]:
        summary += ", %d skipped" % counts["skipped"]
    print(summary)
    return status


if __name__ == "__main__":
    sys.exit(main())

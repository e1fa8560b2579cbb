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

Without MESON-TEST-ARGS the tests are named to meson in an order of their
own: meson 1.0 starts a test that may not run beside others (is_parallel:
false) only once every test started before it has ended, so one long test
registered before such a test ran alone while the other cores idled (a
third of CI's test time). The tests that run alone go first, in the order
meson.build registers them; the others follow, longest first (its duration
in this build's last test log, else its timeout), so that the last to start
are short. Every test runs, as `meson test` alone would run it.
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


def durations(builddir):
    """Each test's duration in the newest test log of builddir, by name; {} if none."""
    logs = glob.glob(os.path.join(builddir, "meson-logs", "testlog*.json"))
    if not logs:
        return {}
    took = {}
    with open(max(logs, key=os.path.getmtime), encoding="utf-8", errors="replace") as f:
        for line in f:
            t = json.loads(line)
            took[t["name"].rpartition(" / ")[2]] = t.get("duration") or 0.0
    return took


def scheduled(builddir):
    """The names of builddir's tests: those that run alone first, then the rest longest first."""
    p = subprocess.run(["meson", "introspect", "--tests", builddir], capture_output=True,
                       text=True)
    if p.returncode:
        return []
    took = durations(builddir)
    alone, beside, seen = [], [], set()
    for t in json.loads(p.stdout):
        if t["name"] in seen:  # one name selects every test so named
            continue
        seen.add(t["name"])
        (beside if t.get("is_parallel", True) else alone).append(t)
    beside.sort(key=lambda t: -took.get(t["name"], t.get("timeout") or 30))
    return [t["name"] for t in alone + beside]


def main():
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        print(__doc__.strip())
        return 2
    builddir = sys.argv[1]
    since = time.time() - 1
    args = sys.argv[2:] or scheduled(builddir)
    status = subprocess.call(["meson", "test", "-C", builddir, "--print-errorlogs"] + args)
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

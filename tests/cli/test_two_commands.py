#!/usr/bin/env python3
"""The README's two commands and .ci/run: one set of packages, one test command.

usage: test_two_commands.py SOURCE_ROOT

- The README's first command installs the packages .ci/run installs, no more
  and no fewer, and among them each one the README says a part needs
  ("Debian's `bash-completion` package loads it").
- .ci/run sets up and runs the suite with the README's second command, word
  for word.
"""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pyhelp"))
from kctest import Failure, check, run_tests  # noqa: E402

SOURCE_ROOT = os.path.abspath(sys.argv[1])


def read(*path):
    with open(os.path.join(SOURCE_ROOT, *path)) as f:
        return f.read()


def joined(text):
    """Shell text with its line continuations joined."""
    return re.sub(r"[ \t]*\\\n[ \t]*", " ", text)


def readme_command(number):
    """The README's numbered command (its comment lines dropped), as one line."""
    m = re.search(r"^# %d\. .*?\n(.*?)(?=^\n|^# \d\. |^```)" % number, read("README.md"),
                  re.M | re.S)
    if not m:
        raise Failure("the README has no command %d" % number)
    return " ".join(l for l in joined(m.group(1)).splitlines()
                    if l.strip() and not l.lstrip().startswith("#")).strip()


def apt_packages(command):
    m = re.search(r"apt-get install ([^&|;>]*)", command)
    if not m:
        raise Failure("no apt-get install in %r" % command[:200])
    return {w for w in m.group(1).split() if not w.startswith("-")}


def test_same_packages(root):
    del root
    readme = apt_packages(readme_command(1))
    ci = apt_packages(joined(read(".ci", "run")))
    check(readme == ci, "the README installs %s more, .ci/run %s more"
          % (sorted(readme - ci) or "nothing", sorted(ci - readme) or "nothing"))
    needed = set(re.findall(r"Debian's\s+`([a-z0-9.+-]+)`\s+package", read("README.md")))
    check("bash-completion" in needed, "the README says which package loads the completion")
    check(needed <= readme, "the README's first command installs what the README says "
          "is needed: %s missing" % sorted(needed - readme))
    print("     %d packages, the same in both; named as needed: %s"
          % (len(readme), ", ".join(sorted(needed))))


def test_ci_runs_the_readme(root):
    del root
    ci = joined(read(".ci", "run"))
    steps = [s.strip() for s in readme_command(2).split("&&")]
    check(len(steps) == 3 and steps[0].startswith("meson setup build-check")
          and steps[1].startswith("ninja -C build-check"),
          "the README's second command: setup, build, test: %r" % steps)
    lines = [l.strip() for l in ci.splitlines()]
    for step in (steps[0], steps[2]):
        check(any(l == step or l.startswith(step + " ") for l in lines),
              ".ci/run runs the README's %r" % step)


if __name__ == "__main__":
    sys.exit(run_tests(globals(), only=sys.argv[2:], prefix="kcache-two-commands-"))

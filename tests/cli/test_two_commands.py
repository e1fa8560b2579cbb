#!/usr/bin/env python3
"""The README's two commands and .ci/run: one set of packages, one test command.

usage: test_two_commands.py SOURCE_ROOT

- The README's first command installs the packages .ci/run installs, no more
  and no fewer, and among them each one the README says a part needs
  ("Debian's `bash-completion` package loads it").
- .ci/run sets up and runs the suite with the README's second command, word
  for word.
- That test command, run as the README spells it on a small meson project
  whose one test skips, prints the reason the test gave on the console
  (`meson test` alone prints "exit status 77").
"""
import os
import re
import shlex
import shutil
import subprocess
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


def test_skip_reason_on_console(root):
    """The README's test command on a project with a test that skips: the reason is shown."""
    step = readme_command(2).split("&&")[-1].strip()
    proj = os.path.join(root, "proj")
    os.makedirs(proj)
    with open(os.path.join(proj, "meson.build"), "w") as f:
        f.write("project('skips')\n"
                "sh = find_program('sh')\n"
                "test('passes', sh, args: ['-c', 'true'])\n"
                "test('needs-frob', sh, args: ['-c', 'echo checking; "
                "echo \"skip: no frobnicator here (apt-get install frob)\"; exit 77'])\n")
    build = os.path.join(root, "proj", "build-check")
    p = subprocess.run(["meson", "setup", build, proj], capture_output=True, text=True,
                       timeout=300)
    check(p.returncode == 0, "meson setup of the small project: %s" % p.stdout[-1000:])
    words = [build if w == "build-check" else w for w in shlex.split(step)]
    check(build in words, "the README's test command names build-check: %r" % step)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MESON_")}
    p = subprocess.run(words, cwd=SOURCE_ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    print("     %s -> exit %d" % (step, p.returncode))
    out = p.stdout + p.stderr
    check(p.returncode == 0, "a skip is not a failure: exit %d: %s" % (p.returncode, out[-1000:]))
    check("no frobnicator here (apt-get install frob)" in out,
          "the skipped test's reason is on the console: %s" % out[-1500:])
    shown = [l for l in out.splitlines() if "frobnicator" in l]
    print("     the console says: %s" % shown)


if __name__ == "__main__":
    if not shutil.which("meson"):
        print("skip: meson is not on PATH")
        sys.exit(77)
    sys.exit(run_tests(globals(), only=sys.argv[2:], prefix="kcache-two-commands-"))

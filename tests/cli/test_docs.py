#!/usr/bin/env python3
"""The docs keep up with the CLI: every field --json prints is in
kcache-json(7), every option --help lists is in kcache(1) and in the bash
completion, and meson installs both man pages.

Usage: test_docs.py KCACHE KCACHE_FILL SOURCE_ROOT BUILD_ROOT
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

KCACHE, FILL, SRC, BUILD = (os.path.abspath(a) for a in sys.argv[1:5])
SAXPY = 'extern "C" __global__ void saxpy(float *y) { y[threadIdx.x] *= 2.0f; }\n'


def read(*path):
    with open(os.path.join(SRC, *path)) as f:
        return f.read()


def keys(doc, found):
    if isinstance(doc, dict):
        for k, v in doc.items():
            found.add(k)
            keys(v, found)
    elif isinstance(doc, list):
        for v in doc:
            keys(v, found)
    return found


def help_verbs(text):
    """Every verb `kcache --help` lists: the first word of each line under "Verbs:"."""
    lines = text.splitlines()
    start = lines.index("Verbs:") + 1 if "Verbs:" in lines else len(lines)
    verbs = []
    for line in lines[start:]:
        if not line.strip():
            break
        verbs.append(line.split()[0])
    return verbs


def main():
    failures = []
    root = tempfile.mkdtemp(prefix="kcache-docs-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    env.update(KCACHE_DIR=os.path.join(root, "cache"), HOME=root)

    def run(*args, rc=None):
        p = subprocess.run([KCACHE] + list(args), capture_output=True, env=env, timeout=120)
        if rc is not None and p.returncode != rc:
            failures.append("kcache %s: exit %d: %s" % (" ".join(args), p.returncode, p.stderr))
        return p.stdout.decode()

    try:
        manual = read("doc", "kcache-json.7")
        documented = set(re.findall(r"\\fB([a-z0-9_]+)(?:\[\])?\\fR", manual))
        printed = set()
        subprocess.run([FILL, os.path.join(root, "cache", "kcache.db"), "3", "--inputs"],
                       check=True, capture_output=True)
        key = json.loads(run("ls", "--json"))["entries"][0]["key"]
        bundle = os.path.join(root, "b.kcache")
        for args in (("ls",), ("stats",), ("config",), ("path",), ("verify",),
                     ("inspect", key[:8]), ("prune", "--dry-run"), ("export", bundle),
                     ("import", bundle), ("recompress", "--dry-run"), ("recompress",),
                     ("clear",), ("vacuum",), ("version",)):
            keys(json.loads(run(*args, "--json", rc=0)), printed)
        src = os.path.join(root, "saxpy.cu")
        with open(src, "w") as f:
            f.write(SAXPY)
        out = run("compile", src, "--arch", "sm_90", "--json")
        if out:
            keys(json.loads(out), printed)
        else:
            print("note: no compiler here: compile's fields not checked")
        # Fields named by their object in the page, not one by one.
        missing = sorted(printed - documented - {"settings", "items", "entries"})
        if missing:
            failures.append("kcache-json(7) lacks: %s" % ", ".join(missing))

        page = read("doc", "kcache.1")
        completion = read("completion", "kcache.bash")
        verbs = help_verbs(run("--help"))
        # Fewer would mean the Verbs: section moved, and this loop checks little.
        if len(verbs) < 17:
            failures.append("kcache --help lists %d verbs: %s" % (len(verbs), verbs))
        for verb in [None] + verbs:
            text = run("--help") if verb is None else run(verb, "--help")
            for opt in sorted(set(re.findall(r"(?<![\w-])(--[a-z][a-z_-]+)", text))):
                if opt == "--help" or "_" in opt:  # NVRTC's own options in examples
                    continue
                if opt.replace("-", "\\-") not in page:
                    failures.append("kcache(1) lacks %s (from %s --help)" % (opt, verb or "kcache"))
                if " %s" % opt not in completion and '"%s' % opt not in completion and \
                        "|%s" % opt not in completion:
                    failures.append("completion lacks %s (from %s --help)" % (opt, verb or "kcache"))

        p = subprocess.run(["meson", "introspect", "--installed", BUILD], capture_output=True)
        installed = json.loads(p.stdout or "{}").values()
        for man in ("man1/kcache.1", "man7/kcache-json.7"):
            if not any(path.endswith(man) for path in installed):
                failures.append("meson does not install %s" % man)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for f in failures:
        print("FAIL %s" % f)
    print("%d failed" % len(failures) if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

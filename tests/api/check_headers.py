#!/usr/bin/env python3
"""Compiles each public header alone, as C11 and as C++11, with warnings as
errors, and uses each of its KCACHE_xxx_INIT macros (and the exported
kcache_xxx_init(out, version) beside it) in both languages. <kcache/kcache.h>,
the umbrella, must include every other public header, so compiling it alone
compiles all of them together (a name declared twice fails there).

usage: check_headers.py --include DIR --cc "CMD" [--cxx "CMD"] INSTALLED...

CMD is a compiler command line, split as a shell would (meson gives each
compiler's cmd_array joined).

DIR is lib/include; every DIR/kcache/*.h is checked, found by globbing, and
must also be among INSTALLED (lib/meson.build's install list), so that a new
header is neither forgotten by this test nor by the install. Exits 77 when no
C++ compiler was found (meson says so when configuring).
"""
import argparse
import glob
import os
import re
import shlex
import subprocess
import sys
import tempfile

C_FLAGS = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-Wstrict-prototypes",
           "-Wmissing-prototypes", "-Wshadow", "-Wundef"]
CXX_FLAGS = ["-std=c++11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-Wshadow", "-Wundef",
             "-Wold-style-cast", "-Wzero-as-null-pointer-constant"]

INIT_RE = re.compile(r"^#define (KCACHE_\w+)_INIT[ \t]", re.M)  # object-like macros only


def uses_of_inits(text):
    """A function using every _INIT macro of a header, and a static from each (C: a
    constant initializer must be one). KCACHE_REQUEST_INIT initialises a
    kcache_request, with kcache_request_init(&r, version) beside it: the type
    and the function are named after the macro, and the test fails if they
    are not."""
    body, statics = [], []
    for i, base in enumerate(INIT_RE.findall(text)):
        typ = base.lower()
        statics.append("static %s s%d = %s_INIT;" % (typ, i, base))
        body.append("    %s a%d = %s_INIT;" % (typ, i, base))
        body.append("    %s b%d;" % (typ, i))
        body.append("    if (%s_init(&b%d, a%d.version) != 0)" % (typ, i, i))
        body.append("        return 0;")
        body.append("    n += a%d.version + b%d.version + s%d.version;" % (i, i, i))
    if not body:
        return ""
    return "\n".join(statics + [
        "unsigned kcache_header_test_use(void);",
        "unsigned kcache_header_test_use(void)",
        "{",
        "    unsigned n = 0;"] + body + ["    return n;", "}", ""])


def compile_one(cmd, flags, lang, include, source):
    suffix = ".c" if lang == "c" else ".cc"
    with tempfile.TemporaryDirectory(prefix="kcache-headers-") as d:
        src = os.path.join(d, "use" + suffix)
        with open(src, "w") as f:
            f.write(source)
        p = subprocess.run(cmd + flags + ["-I", include, "-c", src, "-o", os.path.join(d, "use.o")],
                           capture_output=True, text=True)
        return p.returncode, (p.stdout + p.stderr).strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--include", required=True)
    ap.add_argument("--cc", required=True)
    ap.add_argument("--cxx", default="")
    ap.add_argument("installed", nargs="*")
    a = ap.parse_args()
    a.cc, a.cxx = shlex.split(a.cc), shlex.split(a.cxx)

    headers = sorted(glob.glob(os.path.join(a.include, "kcache", "*.h")))
    if not headers:
        print("no headers under %s/kcache" % a.include)
        return 1
    failures = 0
    installed = {os.path.realpath(h) for h in a.installed}
    for h in headers:
        if os.path.realpath(h) not in installed:
            print("FAIL %s is not installed: add it to kcache_headers in lib/meson.build" % h)
            failures += 1
    umbrella = os.path.join(a.include, "kcache", "kcache.h")
    umbrella_text = open(umbrella).read() if os.path.exists(umbrella) else ""
    for h in headers:
        name = "kcache/" + os.path.basename(h)
        if name != "kcache/kcache.h" and "#include <%s>" % name not in umbrella_text:
            print("FAIL <kcache/kcache.h> does not include <%s>" % name)
            failures += 1
    langs = [("c", a.cc, C_FLAGS)]
    if a.cxx:
        langs.append(("c++", a.cxx, CXX_FLAGS))
    for h in headers:
        name = "kcache/" + os.path.basename(h)
        with open(h) as f:
            text = f.read()
        # Alone, twice (the include guard), then with every _INIT macro used.
        source = '#include <%s>\n#include <%s>\n%s' % (name, name, uses_of_inits(text))
        for lang, cmd, flags in langs:
            rc, out = compile_one(cmd, flags, lang, a.include, source)
            if rc:
                failures += 1
                print("FAIL %s as %s (%s):\n%s\n" % (name, lang, " ".join(flags), out))
            else:
                inits = len(INIT_RE.findall(text))
                print("ok   %s as %s%s" % (name, lang, ", %d _INIT macro(s)" % inits if inits else ""))
    if failures:
        print("%d failure(s)" % failures)
        return 1
    if not a.cxx:
        print("skipped: the C side passed, but no C++ compiler was found "
              "(install g++ and reconfigure) to check the headers as C++")
        return 77
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The shared library exports the public API and nothing else.

usage: check_symbols.py LIBKCACHE.so INCLUDE_DIR

- `nm -D --defined-only` lists only kcache_* symbols: anything else is an
  internal name leaking (a missing `static`, or a layer built without hidden
  visibility), which a program linking libkcache could then clash with.
- Every function declared KCACHE_API in INCLUDE_DIR/kcache/*.h is exported.
- Every exported kcache_* symbol is declared KCACHE_API in a public header:
  an undeclared one is an internal function marked for export by mistake.
"""
import glob
import os
import re
import subprocess
import sys

# Exported by the linker rather than by our code, allowed by name should
# another toolchain add them. With GCC 12 / binutils 2.40 none appears, in the
# release build or with -Db_sanitize=address,undefined: every symbol is
# kcache_* (the exported kcache_xxx_init() functions of the versioned structs
# included).
TOOLCHAIN = {"_init", "_fini", "_edata", "_end", "__bss_start"}

API_RE = re.compile(r"\bKCACHE_API\b[^;{]*?\b(kcache_\w+)\s*\(", re.S)


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    lib, include = sys.argv[1], sys.argv[2]
    p = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True)
    if p.returncode:
        print("nm failed on %s: %s" % (lib, p.stderr.strip()))
        return 1
    exported = set()
    for line in p.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            exported.add(parts[2].split("@")[0])

    declared = {}
    for h in sorted(glob.glob(os.path.join(include, "kcache", "*.h"))):
        # Comments may mention KCACHE_API: drop them before looking.
        text = re.sub(r"/\*.*?\*/", " ", open(h).read(), flags=re.S)
        for name in API_RE.findall(text):
            declared[name] = os.path.basename(h)
    if not declared:
        print("no KCACHE_API declarations found under %s/kcache" % include)
        return 1

    failures = []
    for s in sorted(exported):
        if not s.startswith("kcache_") and s not in TOOLCHAIN:
            failures.append("exported but not kcache_*: %s" % s)
        elif s.startswith("kcache_") and s not in declared:
            failures.append("exported but declared KCACHE_API in no public header: %s" % s)
    for name, h in sorted(declared.items()):
        if name not in exported:
            failures.append("declared KCACHE_API in %s but not exported: %s" % (h, name))
    print("%d symbols exported, %d KCACHE_API functions declared" % (len(exported), len(declared)))
    for f in failures:
        print("FAIL " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

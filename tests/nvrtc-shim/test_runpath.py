#!/usr/bin/env python3
"""A library's dlopen of its neighbour by name, found through the library's own
RUNPATH, still works with the drop-in preloaded (its dlopen is a jump into
glibc's, so glibc sees the library as the caller).

test_runpath.py RUNPATH_MAIN
"""
import os
import subprocess
import sys


def main():
    prog = sys.argv[1]
    kcache = os.environ["KCACHE_EXE"]
    shim = subprocess.run([kcache, "run", "--print-shim"], capture_output=True, text=True,
                          check=True).stdout.strip()
    env = dict(os.environ)
    # Only libkcopener's RUNPATH may find the neighbour: not meson's LD_LIBRARY_PATH.
    env.pop("LD_LIBRARY_PATH", None)
    env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"
    plain = subprocess.run([prog], env=env, capture_output=True, text=True)
    print("without the drop-in:", plain.returncode, plain.stdout.strip(), plain.stderr.strip())
    if plain.returncode != 0:
        # ASan's own dlopen interceptor is a call, not a jump: there, no program can.
        print("SKIP: the neighbour is not found even without the drop-in (a sanitizer's "
              "dlopen interceptor?): nothing to compare")
        return 77
    preloaded = subprocess.run([prog], env=dict(env, LD_PRELOAD=shim), capture_output=True,
                               text=True)
    print("with the drop-in:", preloaded.returncode, preloaded.stdout.strip(),
          preloaded.stderr.strip())
    ok = plain.returncode == 0 and preloaded.returncode == 0
    print("ok" if ok else "FAIL: the neighbour was not found through the caller's RUNPATH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

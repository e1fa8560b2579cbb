#!/usr/bin/env python3
"""A header tree on a network file system, edited at the server as another
host would: inotify on this host hears nothing of it, so the process's memo
of closure checks (lib/compile/closwatch.c) must not cover that directory,
and the edit must be seen by the stat() of the next hit in the same process.
The tree is on sshfs over loopback (tests/pyhelp/sshfs.py) with its caches
off, so that a stat() through the mount sees the server's file as it is.

Usage: test_closwatch_netfs.py TEST_CLOSWATCH (exit 77 without root, FUSE,
sshfs or a toolkit).
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pyhelp"))
from kctest import Skip, check, run_tests  # noqa: E402
import sshfs  # noqa: E402

PROG = os.path.abspath(sys.argv[1])
NO_CACHE = "dir_cache=no,attr_timeout=0,entry_timeout=0,negative_timeout=0"


def test_server_edit_seen(root):
    with sshfs.Mount(root, options=NO_CACHE) as m:
        p = subprocess.run([PROG, "netfs", m.mnt, m.export], capture_output=True, text=True,
                           timeout=300)
        sys.stdout.write(p.stdout + p.stderr)
        if p.returncode == 77:
            raise Skip("no CUDA toolkit")
        check(p.returncode == 0, "test_closwatch netfs exited %d" % p.returncode)


if __name__ == "__main__":
    sys.exit(run_tests(globals()))

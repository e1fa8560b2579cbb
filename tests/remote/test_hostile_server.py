#!/usr/bin/env python3
"""The shared tier against a server that means harm: no redis-server needed.

A fake Redis of our own (Python, 127.0.0.1 only, every wait bounded) that
  - drips: answers a get one byte every 0.25 s. The remote's deadline is for
    the whole operation, so the compile that asks it must finish within
    remote_timeout of a compile without a remote (it used to wait for every
    byte: a minute here, without end for a slower drip);
  - declares a 3 GB value: "$3000000000" then bytes as fast as the socket
    takes them (up to 256 MiB). The reply must be refused on the declared
    size, before it is read: `kcache remote pull` stays within a few MiB of
    a pull of nothing (it used to read everything sent: 2.97 GB resident
    for a whole 3 GB).

Prints the figures (elapsed, resident) it measured.

Usage: test_hostile_server.py KCACHE [TEST-NAME...]
Without a CUDA toolkit the drip test (it compiles a kernel) is skipped, saying so.
"""
import os
import socket
import subprocess
import sys
import time

import remotetest  # beside this script; first: it puts kctest on the path and sets it up
from kctest import Failure, Skip, check, run_tests
from remotetest import TOOLKIT, have_toolkit, kernel

KCACHE = remotetest.kctest.KCACHE
TIMEOUT_MS = 1000
SERVER_LIFETIME = 90  # seconds: the fake server never outlives a test by much
KEY = "ab" * 32


def read_command(f):
    """One RESP array of bulk strings, as a client sends; None at the end."""
    line = f.readline()
    if not line.startswith(b"*"):
        return None
    args = []
    for _ in range(int(line[1:-2])):
        n = int(f.readline()[1:-2])
        args.append(f.read(n + 2)[:-2])
    return args


class FakeRedis(remotetest.FakeServer):
    """Answers like a Redis with one kcache entry, except for the get (mode)."""

    def __init__(self, mode):
        super().__init__(mode, SERVER_LIFETIME)

    def url(self):
        return "redis://127.0.0.1:%d" % self.port

    def handle(self, conn):
        conn.settimeout(1.0)
        f = conn.makefile("rb")
        try:
            while self.alive():
                try:
                    args = read_command(f)
                except socket.timeout:
                    continue
                if args is None:
                    return
                cmd = args[0].upper()
                if cmd == b"EVAL" and b"strlen" in args[1]:
                    self.get(conn)
                elif cmd == b"ZRANGEBYSCORE":
                    member = b"sm_90/" + KEY.encode()
                    empty = self.mode == "empty" or args[5] != b"0"
                    conn.sendall(b"*0\r\n" if empty else
                                 b"*1\r\n$%d\r\n%s\r\n" % (len(member), member))
                elif cmd in (b"SET", b"PING", b"AUTH", b"SELECT"):
                    conn.sendall(b"+OK\r\n")
                else:
                    conn.sendall(b":1\r\n")
        except OSError:
            pass  # the client went away: what a refusal looks like from here
        finally:
            conn.close()

    def get(self, conn):
        if self.mode == "drip":
            # A bulk string of 240 bytes, one every 0.25 s: a minute in all.
            if self.drip(conn, b"$240\r\n", 240):
                conn.sendall(b"\r\n")
        elif self.mode == "huge":
            self.flood(conn, b"$3000000000\r\n")
        else:
            conn.sendall(b"$-1\r\n")

def env_for(root, name, remote):
    return remotetest.Cache(root, name, remote, timeout_ms=TIMEOUT_MS).env


def run_measured(args, env, limit):
    """Runs kcache; returns (exit status, seconds, peak resident KiB, stdout, stderr)."""
    out_path, err_path = env["KCACHE_DIR"] + ".out", env["KCACHE_DIR"] + ".err"
    t0 = time.monotonic()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        p = subprocess.Popen([KCACHE] + args, env=env, stdout=out, stderr=err,
                             stdin=subprocess.DEVNULL)
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - t0 > limit:
                p.kill()
                os.wait4(p.pid, 0)
                raise Failure("kcache %s still running after %d s" % (" ".join(args), limit))
            time.sleep(0.02)
    seconds = time.monotonic() - t0
    with open(out_path, "rb") as f:
        stdout = f.read().decode("utf-8", "replace")
    with open(err_path, "rb") as f:
        stderr = f.read().decode("utf-8", "replace")
    return os.waitstatus_to_exitcode(status), seconds, usage.ru_maxrss, stdout, stderr


def test_drip(root):
    """A server that answers a byte every 0.25 s costs a compile one remote_timeout."""
    if not have_toolkit():
        raise Skip("no CUDA toolkit at %s" % TOOLKIT)
    # The same compile without a remote, for what NVRTC itself takes here.
    rc, base, _, _, err = run_measured(
        ["compile", kernel(root, 1), "--arch", "sm_90", "-o", os.path.join(root, "1.cubin")],
        env_for(root, "base", ""), 120)
    check(rc == 0, "compile without a remote: %s" % err)
    server = FakeRedis("drip")
    try:
        rc, took, _, _, err = run_measured(
            ["compile", kernel(root, 2), "--arch", "sm_90", "-o", os.path.join(root, "2.cubin")],
            env_for(root, "drip", server.url()), 45)
    finally:
        server.stop()
    print("drip: compile %.2f s under a server dripping a byte per 0.25 s "
          "(without a remote: %.2f s; remote_timeout %d ms; %d bytes dripped)"
          % (took, base, TIMEOUT_MS, server.sent))
    check(rc == 0, "the compile returns its artifact whatever the remote does: %s" % err)
    check("no answer within %d ms" % TIMEOUT_MS in err,
          "the timeout is said, naming remote_timeout: %r" % err)
    # Generous: the bound is remote_timeout once, not a benchmark of NVRTC.
    check(took < base + TIMEOUT_MS / 1000.0 + 5.0,
          "the compile took %.1f s: more than one remote_timeout beyond %.1f s" % (took, base))


def test_huge_reply(root):
    """A reply declaring 3 GB is refused on its length, before it is read."""
    empty = FakeRedis("empty")
    try:
        rc, _, base_kib, out, err = run_measured(["remote", "pull", "--json"],
                                                 env_for(root, "empty", empty.url()), 30)
    finally:
        empty.stop()
    check(rc == 0, "a pull of nothing: %s %s" % (out, err))
    server = FakeRedis("huge")
    try:
        rc, took, kib, out, err = run_measured(["remote", "pull", "--json"],
                                               env_for(root, "huge", server.url()), 30)
    finally:
        server.stop()
    print("huge: pull of a value declared 3000000000 bytes: peak resident %.1f MiB "
          "(a pull of nothing: %.1f MiB), %.2f s, %.1f MiB sent before the refusal"
          % (kib / 1024.0, base_kib / 1024.0, took, server.sent / 1048576.0))
    check(kib < base_kib + 16 * 1024,
          "peak resident %d KiB, a pull of nothing %d KiB: the reply was read in"
          % (kib, base_kib))
    check(rc == 0 and '"rejected": 1' in out,
          "the value is rejected and the pull goes on: exit %d %s %s" % (rc, out, err))


TESTS = [test_drip, test_huge_reply]


def main():
    return run_tests(TESTS, sys.argv[2:], prefix="kcache-hostile-")

if __name__ == "__main__":
    sys.exit(main())

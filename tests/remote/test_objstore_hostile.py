#!/usr/bin/env python3
"""The object-storage tiers against servers that fail or mean harm: no real
server needed. A fake HTTP server of our own (Python, 127.0.0.1 only, every
wait bounded) answers a get in one of these ways:

  silent   accepts, reads the request, never answers
  drip     "200, Content-Length: 240", then a byte every 0.25 s (a minute)
  huge     "200, Content-Length: 3000000000", then bytes as fast as the
           socket takes them (up to 256 MiB): refused on the declared length
  garbage  bytes that are not HTTP, then closes
  500      500 Internal Server Error
  403      403 with S3's AccessDenied error document (an s3:// remote)
  dies     "200, Content-Length: 100000", 5000 bytes, then closes

Every compile succeeds and ends within one remote_timeout of a compile
without a remote; after a failure the next process leaves the server alone
(the back-off file the machine's processes share); the huge reply is not read (peak resident within 16 MiB
of the compile without a remote). Prints each figure.

Usage: test_objstore_hostile.py KCACHE [MODE...]
"""
import os
import socket
import sys
import time

import remotetest  # beside this script; first: it puts kctest on the path and sets it up
from kctest import Failure, Skip, check, run_tests
from remotetest import TOOLKIT, have_toolkit, kernel
from test_hostile_server import run_measured

TIMEOUT_MS = 1000
SERVER_LIFETIME = 90  # seconds: the fake server never outlives a test by much
MODES = ["silent", "drip", "huge", "garbage", "500", "403", "dies"]
ONLY = sys.argv[2:]


class FakeHTTP(remotetest.FakeServer):
    """Answers a PUT with 201 and a GET or HEAD the way mode says."""

    def __init__(self, mode):
        super().__init__(mode, SERVER_LIFETIME)
        self.requests = []

    def read_request(self, f):
        """The request line and headers (and a PUT's body, skipped); None at the end."""
        line = f.readline()
        if not line:
            return None
        length = 0
        while True:
            h = f.readline()
            if h in (b"\r\n", b"\n", b""):
                break
            if h.lower().startswith(b"content-length:"):
                length = int(h.split(b":")[1])
        if length:
            f.read(length)
        return line.split()[0]

    def handle(self, conn):
        conn.settimeout(1.0)
        f = conn.makefile("rb")
        try:
            while self.alive():
                try:
                    verb = self.read_request(f)
                except socket.timeout:
                    continue
                if verb is None:
                    return
                self.requests.append(verb)
                if verb == b"PUT":
                    conn.sendall(b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n")
                elif not self.answer(conn):
                    return
        except OSError:
            pass  # the client went away: what a refusal looks like from here
        finally:
            conn.close()

    def answer(self, conn):
        """Answers a GET; False when the connection is to be closed."""
        m = self.mode
        if m == "silent":
            while self.alive():
                time.sleep(0.1)
            return False
        if m == "drip":
            return self.drip(conn, b"HTTP/1.1 200 OK\r\nContent-Length: 240\r\n\r\n", 240)
        if m == "huge":
            self.flood(conn, b"HTTP/1.1 200 OK\r\nContent-Length: 3000000000\r\n\r\n")
            return False
        if m == "garbage":
            conn.sendall(b"\x00\xffRESP? +OK\r\n$-1\r\n" + os.urandom(512))
            return False
        if m == "500":
            conn.sendall(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n")
            return True
        if m == "403":
            body = (b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>AccessDenied"
                    b"</Code><Message>Access Denied</Message></Error>")
            conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Type: application/xml\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            return True
        if m == "dies":
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"k" * 5000)
            return False
        raise Failure("no mode %s" % m)


def env_for(root, name, server):
    if server is None:
        remote = {"KCACHE_REMOTE": ""}
    elif server.mode == "403":
        remote = {"KCACHE_REMOTE": "s3://kcache-test/p",
                  "KCACHE_S3_ENDPOINT": "http://127.0.0.1:%d" % server.port,
                  "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}
    else:
        remote = {"KCACHE_REMOTE": "http://127.0.0.1:%d/cache" % server.port}
    return remotetest.Cache(root, name, remote["KCACHE_REMOTE"], remote,
                            timeout_ms=TIMEOUT_MS).env


def compile_with(root, n, server):
    """Compiles kernel n with a cache of its own: (exit, seconds, peak KiB, stderr)."""
    name = "base" if server is None else server.mode
    rc, took, kib, _, err = run_measured(
        ["compile", kernel(root, n), "--arch", "sm_90", "-o",
         os.path.join(root, "%s.cubin" % name)], env_for(root, name, server), 60)
    return rc, took, kib, err


def test_hostile_servers(root):
    """Every compile succeeds, within one remote_timeout of a compile without a remote."""
    if not have_toolkit():
        raise Skip("no CUDA toolkit at %s" % TOOLKIT)
    rc, base, base_kib, err = compile_with(root, 0, None)
    check(rc == 0, "compile without a remote: %s" % err)
    print("without a remote: compile %.2f s, peak resident %.1f MiB" % (base, base_kib / 1024.0))
    for i, mode in enumerate(m for m in MODES if not ONLY or m in ONLY):
        server = FakeHTTP(mode)
        try:
            rc, took, kib, err = compile_with(root, 100 + i, server)
            asked = len(server.requests)
            if mode == "500":
                # The back-off is the machine's: the next process leaves the server alone.
                rc2, _, _, err2 = compile_with(root, 200, server)
                check(rc2 == 0 and len(server.requests) == asked and not err2.strip(),
                      "after a failure the next process asks nothing for 30 s: %d requests "
                      "then %d, %r" % (asked, len(server.requests), err2))
        finally:
            server.stop()
        said = [line for line in err.splitlines() if "warning" in line]
        print("%-8s compile %.2f s (+%.2f s), peak %.1f MiB, %d bytes sent; said: %s"
              % (mode, took, took - base, kib / 1024.0, server.sent,
                 said[0] if said else "nothing"))
        check(rc == 0, "%s: the compile returns its artifact whatever the remote does: %s"
              % (mode, err))
        check(len(said) == 1, "%s: one warning: %r" % (mode, err))
        # Generous: the bound is remote_timeout once, not a benchmark of NVRTC.
        check(took < base + TIMEOUT_MS / 1000.0 + 5.0,
              "%s: the compile took %.1f s: more than one remote_timeout beyond %.1f s"
              % (mode, took, base))
        if mode in ("silent", "drip"):
            check("no answer within %d ms" % TIMEOUT_MS in err, "%s: %r" % (mode, err))
        if mode == "huge":
            check("over the bound" in err and kib < base_kib + 16 * 1024,
                  "huge: refused on its length, not read: peak %d KiB, base %d KiB, %r"
                  % (kib, base_kib, err))
        if mode == "403":
            check("AccessDenied" in err and "AWS_ACCESS_KEY_ID" in err, "403: %r" % err)


def main():
    return run_tests([test_hostile_servers], (), prefix="kcache-objhostile-")


if __name__ == "__main__":
    sys.exit(main())

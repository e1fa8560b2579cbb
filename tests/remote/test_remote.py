#!/usr/bin/env python3
"""The shared tier against a real redis-server.

Each test starts its own redis-server on a free loopback port with its own
config file in a temporary directory, and stops it after. Kernels are tiny
and written here. NVRTC runs on the CPU, so no GPU is needed.

Usage: test_remote.py KCACHE [TEST-NAME...]
Exits 77 (skipped) when redis-server cannot start or there is no toolkit.
"""
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import remotetest  # beside this script; first: it puts kctest on the path and sets it up
from kctest import Failure, Skip, check, run_tests
from remotetest import TOOLKIT, have_toolkit, kernel

KCACHE = remotetest.kctest.KCACHE
REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"

# About a second of NVRTC, so that eight processes missing it overlap.
SLOW = r'''
template <int N> struct F { __device__ static float run(float x)
  { return F<N - 1>::run(x * 1.0001f + (float)N); } };
template <> struct F<0> { __device__ static float run(float x) { return x; } };
template <int N> __device__ float chain(float x) { return F<N>::run(x) + chain<N - 1>(x); }
template <> __device__ float chain<0>(float x) { return x; }
extern "C" __global__ void slow(float *x) { x[threadIdx.x] = chain<80>(x[threadIdx.x]); }
'''


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Redis:
    """A redis-server of our own on 127.0.0.1, and a minimal RESP client."""

    def __init__(self, root, extra=""):
        self.dir = tempfile.mkdtemp(prefix="redis-", dir=root)
        self.port = free_port()
        conf = os.path.join(self.dir, "redis.conf")
        with open(conf, "w") as f:
            f.write("bind 127.0.0.1\nport %d\nprotected-mode yes\nsave \"\"\n"
                    "appendonly no\ndir %s\nlogfile %s\n%s\n"
                    % (self.port, self.dir, os.path.join(self.dir, "redis.log"), extra))
        self.proc = subprocess.Popen([REDIS, conf], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        self.password = None
        for _ in range(200):  # bounded: 10 s
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
        self.stop()
        raise Skip("redis-server did not start on 127.0.0.1:%d" % self.port)

    def url(self, auth=""):
        return "redis://%s127.0.0.1:%d" % (auth, self.port)

    def stop(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def cmd(self, *args, auth=None):
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            f = s.makefile("rb")
            if auth:
                s.sendall(encode(["AUTH"] + list(auth)))
                read_reply(f)
            s.sendall(encode(list(args)))
            return read_reply(f)


def encode(args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def read_reply(f):
    line = f.readline()
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        return Exception(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)
        return data[:-2]
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [read_reply(f) for _ in range(n)]
    raise Failure("bad reply from redis: %r" % line)


class Cache(remotetest.Cache):
    def compile(self, src, *extra, env=None):
        """Compiles src (always succeeding), returning (item, stderr, artifact bytes)."""
        out_file = os.path.join(self.root, "out-%d.cubin" % time.monotonic_ns())
        out, err = self.run("compile", src, "--arch", "sm_90", "-o", out_file, "--json",
                            *extra, env=env)
        item = json.loads(out)["items"][0]
        check(item["status"] == "ok" and os.path.exists(out_file),
              "the compile returns its artifact whatever the remote does: %s %s" % (item, err))
        with open(out_file, "rb") as f:
            data = f.read()
        os.unlink(out_file)
        return item, err, data

    def remote_stats(self):
        out, _ = self.run("stats", "--json")
        return json.loads(out)["remote"]

    def stats(self):
        out, _ = self.run("stats", "--json")
        return json.loads(out)


def entry_names(redis):
    return [k for k in redis.cmd("KEYS", "kcache:entry:*")]


# ---- tests ---------------------------------------------------------------------------------

def test_two_caches_share(root):
    r = Redis(root)
    try:
        a, b = Cache(root, "a", r.url()), Cache(root, "b", r.url())
        src = kernel(root, 1)
        ia, _, da = a.compile(src)
        ib, _, db = b.compile(src)
        check(not ia["hit"], "first compile misses: %s" % ia)
        check(ib["hit"] and ib["remote_hit"], "the second cache hits from the remote: %s" % ib)
        check(da == db and len(da) > 0, "bytes identical through the remote")
        ic, _, dc = b.compile(src)
        check(ic["hit"] and not ic["remote_hit"] and dc == da, "then a local hit")
        sa, sb = a.remote_stats(), b.remote_stats()
        check(sa["pushes"] == 1 and sa["misses"] == 1 and sa["bytes_out"] > 0,
              "a pushed once: %s" % sa)
        check(sb["hits"] == 1 and sb["bytes_in"] > 0 and sb["saved_ns"] > 0 and
              sb["errors"] == 0, "b counts the remote hit: %s" % sb)
        human, _ = b.run("stats")
        check("Remote hits:" in human and "Remote time saved:" in human, human)
        # push / pull: a third cache takes everything a pushed, checked.
        a.compile(kernel(root, 2))
        c = Cache(root, "c", r.url())
        out, _ = c.run("remote", "pull", "--arch", "sm_90", "--json")
        pulled = json.loads(out)
        check(pulled["pulled"] == 2 and pulled["rejected"] == 0, "pull: %s" % pulled)
        out, _ = c.run("remote", "pull", "--arch", "sm_80", "--json")
        check(json.loads(out)["pulled"] == 0, "pull --arch filters")
        ls = json.loads(c.run("ls", "--json")[0])["entries"]
        check(len(ls) == 2, "pulled entries are in the local cache: %s" % ls)
        r.cmd("FLUSHALL")
        out, _ = a.run("remote", "push", "--since", "1h", "--json")
        check(json.loads(out)["pushed"] == 2 and len(entry_names(r)) == 2, "push: %s" % out)
        out, _ = a.run("remote", "check", "--json")
        info = json.loads(out)
        check(info["entries"] == 2 and info["maxmemory_policy"] and info["latency_ns"] > 0,
              "check: %s" % info)
        # remote_read_only: takes entries, never pushes.
        ro = Cache(root, "ro", r.url(), {"KCACHE_REMOTE_READ_ONLY": "true"})
        item, _, _ = ro.compile(src)
        check(item["remote_hit"], "read-only still takes: %s" % item)
        ro.compile(kernel(root, 20))
        check(ro.remote_stats()["pushes"] == 0 and len(entry_names(r)) == 2,
              "read-only pushes nothing")
        ro.run("remote", "push", rc=1)
    finally:
        r.stop()


def test_local_only_records(root):
    """The drop-in's record of what its NVRTC says of itself is believed only where
    that NVRTC wrote it (lib/store/ingest.c): a push leaves it out."""
    r = Redis(root)
    try:
        a = Cache(root, "a", r.url())
        a.fill(1, "--namespace", "kcache.nvrtc", "--caller-key", "libnvrtc.so.13 build-id 00")
        a.fill(1, "--namespace", "someone.else", "--seed", 2)
        out, _ = a.run("remote", "push", "--json")
        check(json.loads(out)["pushed"] == 1 and len(entry_names(r)) == 1,
              "a push sends the caller's entry, not the drop-in's record: %s %s"
              % (out, entry_names(r)))
        r.cmd("FLUSHALL")
        out, _ = a.run("remote", "push")
        check(out.startswith("Pushed 1 entry ("), "one entry, said in the singular: %r" % out)
    finally:
        r.stop()


def test_fleet_compiles_once(root):
    """Eight processes over two caches miss one key: NVRTC runs once."""
    r = Redis(root)
    try:
        caches = [Cache(root, "f%d" % i, r.url()) for i in range(2)]
        src = kernel(root, 80, SLOW)
        procs = []
        for i in range(8):
            c = caches[i % 2]
            e = dict(c.env)
            procs.append(subprocess.Popen(
                [KCACHE, "compile", src, "--arch", "sm_90", "--json"], env=e,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL))
        items = []
        for p in procs:
            out, err = p.communicate(timeout=300)
            check(p.returncode == 0, "compile failed: %s" % err.decode())
            items.append(json.loads(out)["items"][0])
        keys = {i["key"] for i in items}
        misses = sum(c.stats()["misses"] for c in caches)
        check(len(keys) == 1, "one key")
        check(misses == 1, "NVRTC ran %d times for one key across two caches" % misses)
        check(sum(1 for i in items if i["remote_hit"]) >= 1, "the other cache hit remotely")
    finally:
        r.stop()


def test_threads(root):
    """Threads of one process share a compiler and its remote (kcache compile -j)."""
    r = Redis(root)
    try:
        a, b = Cache(root, "a", r.url()), Cache(root, "b", r.url())
        files = [kernel(root, 40 + i) for i in range(6)]
        for c, want in ((a, False), (b, True)):
            out, _ = c.run("compile", "--arch", "sm_90", "-j", "4", "--json", *files)
            items = json.loads(out)["items"]
            check(len(items) == 6 and all(i["status"] == "ok" for i in items), "%s" % items)
            check(all(i["remote_hit"] == want for i in items), "remote hits %s: %s"
                  % (want, [i["remote_hit"] for i in items]))
        check(len(entry_names(r)) == 6 and a.remote_stats()["pushes"] == 6, "six pushed")
    finally:
        r.stop()


def test_server_killed(root):
    r = Redis(root)
    try:
        a = Cache(root, "a", r.url())
        a.compile(kernel(root, 3))
        check(a.remote_stats()["pushes"] == 1, "pushed while up")
        r.proc.kill()
        r.proc.wait(10)
        _, err, _ = a.compile(kernel(root, 4))
        s = a.remote_stats()
        check(s["errors"] == 1 and "left alone" in err, "one failure, said: %s %r" % (s, err))
        # Every later process of the machine leaves it alone: no second failure.
        for n in (5, 6):
            a.compile(kernel(root, n))
        s = a.remote_stats()
        check(s["errors"] == 1 and s["skipped"] >= 2, "later processes skip it: %s" % s)
        check(os.path.exists(os.path.join(a.dir, "remote-down")), "the shared back-off file")
        out, _ = a.run("remote", "check", rc=1)
    finally:
        r.stop()


def test_server_killed_mid_run(root):
    """One process compiling three kernels; the server dies during the second."""
    r = Redis(root)
    try:
        a = Cache(root, "a", r.url())
        files = [kernel(root, 30), kernel(root, 81, SLOW), kernel(root, 31)]
        p = subprocess.Popen([KCACHE, "compile", "--arch", "sm_90", "--json"] + files,
                             env=a.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        # Kill once the first kernel is pushed (the slow one is then compiling).
        for _ in range(400):  # bounded: 20 s
            if r.cmd("KEYS", "kcache:entry:*"):
                break
            time.sleep(0.05)
        r.proc.kill()
        r.proc.wait(10)
        out, err = p.communicate(timeout=300)
        check(p.returncode == 0, "the run survives the server's death: exit %d %r"
              % (p.returncode, err.decode()))
        items = json.loads(out)["items"]
        check(len(items) == 3 and all(i["status"] == "ok" for i in items), "%s" % items)
        s = a.remote_stats()
        check(s["errors"] == 1 and s["pushes"] == 1, "one failure for the process: %s" % s)
    finally:
        r.stop()


def test_server_stopped(root):
    """A server stopped with SIGSTOP: each process pays one timeout, then skips."""
    r = Redis(root)
    try:
        a = Cache(root, "a", r.url())
        a.compile(kernel(root, 7))
        os.kill(r.proc.pid, signal.SIGSTOP)
        try:
            _, err, _ = a.compile(kernel(root, 8))
            _, err2, _ = a.compile(kernel(root, 9))
        finally:
            os.kill(r.proc.pid, signal.SIGCONT)
        s = a.remote_stats()
        check(s["errors"] == 1 and s["skipped"] >= 1,
              "one timeout, then left alone: %s %r %r" % (s, err, err2))
        check("left alone" in err and "left alone" not in err2, err + err2)
    finally:
        r.stop()


def test_server_full(root):
    """maxmemory reached with noeviction: pushes are refused, compiles go on."""
    r = Redis(root, "maxmemory 3mb\nmaxmemory-policy noeviction")
    try:
        # Fill to the brim: large values, then smaller ones into what is left
        # (a refused write frees its own buffer, leaving room for a small one).
        n = 0
        for size in (256 * 1024, 16 * 1024, 1024, 64):
            for _ in range(200):  # bounded
                n += 1
                if isinstance(r.cmd("SET", "fill:%d" % n, b"x" * size), Exception):
                    break
        a = Cache(root, "a", r.url())
        _, err, _ = a.compile(kernel(root, 10))
        s = a.remote_stats()
        check(s["errors"] == 1 and s["pushes"] == 0 and "allkeys-lru" in err,
              "a refused push is counted and explained: %s %r" % (s, err))
        _, err = a.run("remote", "check")
        check("refuse writes" in err, "check warns: %r" % err)
    finally:
        r.stop()


def test_auth(root):
    r = Redis(root, "requirepass rightpw\nuser ci on >cipw ~kcache:* +@all")
    try:
        bad = Cache(root, "bad", r.url("default:wrongpw@"))
        _, err, _ = bad.compile(kernel(root, 11))
        s = bad.remote_stats()
        check(s["errors"] == 1 and "password" in err, "wrong password said: %s %r" % (s, err))
        _, err = bad.run("remote", "check", rc=1)
        check("WRONGPASS" in err or "password" in err, err)
        good = Cache(root, "good", r.url("ci:cipw@"))
        good.compile(kernel(root, 11))
        check(good.remote_stats()["pushes"] == 1, "the ACL user pushes")
        out, _ = good.run("remote", "check", "--json")
        check(json.loads(out)["authenticated"], out)
        out, _ = good.run("config")
        check("cipw" not in out and "***" in out, "config hides the password: %s" % out)
    finally:
        r.stop()


def test_tampered(root):
    r = Redis(root)
    try:
        a, b = Cache(root, "a", r.url()), Cache(root, "b", r.url())
        a.compile(kernel(root, 12))
        (name,) = entry_names(r)
        original = r.cmd("GET", name)
        key = bytes.fromhex(name.decode().rsplit(":", 1)[1])
        # A byte of the artifact changed (the value ends with the artifact and
        # a 32-byte checksum); then the same with the checksum recomputed, as
        # someone who means it would: the artifact's digest still says no.
        for fix_checksum, why in ((False, "checksum"), (True, "digest")):
            value = bytearray(original)
            value[-40] ^= 0x40
            if fix_checksum:
                value[-32:] = hashlib.blake2b(key + bytes(value[:-32]), digest_size=32).digest()
            r.cmd("SET", name, bytes(value))
            item, err, _ = b.compile(kernel(root, 12))
            check(not item["hit"], "a tampered value is not served: %s" % item)
            check("ignored" in err and why in err, "refused by its %s: %r" % (why, err))
            b.run("clear")
        check(b.remote_stats()["rejected"] == 2, "counted: %s" % b.remote_stats())
        # The compile that refused it pushed a good value in its place.
        c = Cache(root, "c", r.url())
        item, _, _ = c.compile(kernel(root, 12))
        check(item["remote_hit"], "the bad value was replaced: %s" % item)
    finally:
        r.stop()


def test_signatures(root):
    r = Redis(root)
    try:
        plain = Cache(root, "plain", r.url())
        signed = Cache(root, "signed", r.url(), {"KCACHE_REMOTE_SECRET": "fleet-secret"})
        other = Cache(root, "other", r.url(), {"KCACHE_REMOTE_SECRET": "not-the-secret"})
        src = kernel(root, 13)
        plain.compile(src)  # unsigned
        item, err, _ = signed.compile(src)
        check(not item["hit"] and "not signed" in err, "unsigned not served: %s %r" % (item, err))
        # signed pushed its own (signed) entry; a wrong secret does not take it.
        item, err, _ = other.compile(src)
        check(not item["hit"] and "signature" in err, "badly signed not served: %r" % err)
        check(other.remote_stats()["rejected"] == 1, "counted")
        third = Cache(root, "third", r.url(), {"KCACHE_REMOTE_SECRET": "fleet-secret"})
        r.cmd("DEL", *entry_names(r))
        signed.run("remote", "push")
        item, _, _ = third.compile(src)
        check(item["remote_hit"], "the right secret is served: %s" % item)
        out, _ = third.run("config")
        check("fleet-secret" not in out, "config hides the secret")
    finally:
        r.stop()


def test_oversized(root):
    """A value claiming an artifact over the bound is refused before decompressing."""
    r = Redis(root)
    try:
        a, b = Cache(root, "a", r.url()), Cache(root, "b", r.url())
        a.compile(kernel(root, 14))
        (name,) = entry_names(r)
        value = bytearray(r.cmd("GET", name))
        # raw_size (offset 24, u64 LE) claims 8 GiB: a decompression bomb's header.
        value[24:32] = (8 << 30).to_bytes(8, "little")
        r.cmd("SET", name, bytes(value))
        item, err, _ = b.compile(kernel(root, 14))
        check(not item["hit"] and "over the bound" in err,
              "refused on its sizes, not after decompressing: %r" % err)
        check(b.remote_stats()["rejected"] == 1, "counted")
    finally:
        r.stop()


def test_usage(root):
    c = Cache(root, "u", "")
    _, err = c.run("remote", rc=1)
    check("no remote set" in err, err)
    c.run("remote", "--remote", "ftp://x", rc=2)
    c.run("remote", "frobnicate", rc=2)
    out, _ = c.run("remote", "--help")
    check("push" in out and "pull" in out, out)
    c.run("compile", "x.cu", "--arch", "sm_90", "--remote", "tcp://x", rc=2)


TESTS = [test_two_caches_share, test_fleet_compiles_once, test_threads, test_server_killed,
         test_server_killed_mid_run,
         test_server_stopped, test_server_full, test_auth, test_tampered, test_signatures,
         test_oversized, test_usage, test_local_only_records]


def main():
    if not have_toolkit():
        print("skip: no CUDA toolkit at %s" % TOOLKIT)
        return 77
    if not os.access(REDIS, os.X_OK):
        print("skip: redis-server is not installed (apt-get install redis-server)")
        return 77
    # A server that would not start for one test would not for the next.
    return run_tests(TESTS, sys.argv[2:], prefix="kcache-remote-", stop_on_skip=True)

if __name__ == "__main__":
    sys.exit(main())

"""kcache.ProgramCache: cuda.core's ProgramCacheResource protocol, persistence,
the LRU under a cap, many processes on one file, and cuda.core's own compile."""
import hashlib
import json
import multiprocessing
import os
import subprocess
import sys
import threading

import pytest

import kcache
from conftest import cuda_core, run_cli

KiB = 1 << 10


def test_is_cuda_cores_resource():
    cuda_core()
    from cuda.core.utils import ProgramCacheResource

    assert issubclass(kcache.ProgramCache, ProgramCacheResource)
    # Named as users spell it (repr, pickle by reference, tracebacks), though made on first use.
    assert (kcache.ProgramCache.__module__, kcache.ProgramCache.__qualname__) == ("kcache", "ProgramCache")
    import pickle

    assert pickle.loads(pickle.dumps(kcache.ProgramCache)) is kcache.ProgramCache
    # The protocol leaves __contains__ out on purpose (a check-then-read races): so do we.
    assert not hasattr(ProgramCacheResource, "__contains__")
    assert not hasattr(kcache.ProgramCache, "__contains__")


def test_mapping_protocol(cache_dir):
    with kcache.ProgramCache(cache_dir) as c:
        assert len(c) == 0
        c[b"k1"] = b"one"
        c["k2"] = bytearray(b"two")
        c[b"k3"] = memoryview(b"three")
        assert c[b"k1"] == b"one" and c[b"k2"] == b"two" and c[b"k3"] == b"three"
        assert isinstance(c[b"k2"], bytes)
        assert len(c) == 3
        assert c.get(b"nope") is None
        assert c.get(b"nope", b"dflt") == b"dflt"
        assert c.get(b"k1") == b"one"
        c.update({b"k4": b"four", "k5": b"five"})
        c.update([(b"k6", b"six")])
        assert len(c) == 6 and c[b"k6"] == b"six"
        c[b"k1"] = b"uno"  # replaces
        assert c[b"k1"] == b"uno" and len(c) == 6
        del c[b"k1"]
        assert len(c) == 5
        with pytest.raises(KeyError):
            c[b"k1"]
        with pytest.raises(KeyError):
            del c[b"k1"]
        c[b""] = b""  # an empty key and an empty value are a key and a value
        assert c[b""] == b""
        c.clear()
        assert len(c) == 0
        with pytest.raises(KeyError):
            c[b"k2"]


def test_errors_of_the_protocol(cache_dir):
    c = kcache.ProgramCache(cache_dir)
    for bad_key in (1, 1.5, None, ("a",), object()):
        with pytest.raises(TypeError):
            c[bad_key] = b"x"
        with pytest.raises(TypeError):
            c[bad_key]
        with pytest.raises(TypeError):
            del c[bad_key]
    for bad_value in ("text", 1, None, [b"x"]):
        with pytest.raises(TypeError):
            c[b"k"] = bad_value
    with pytest.raises(ValueError):
        kcache.ProgramCache(cache_dir, max_size_bytes=0)
    with pytest.raises(ValueError):
        kcache.ProgramCache(cache_dir, max_size_bytes=-5)
    c.close()
    with pytest.raises(ValueError):
        c[b"k"]  # closed


def test_str_and_bytes_keys_are_one(cache_dir):
    c = kcache.ProgramCache(cache_dir)
    c["clé"] = b"v1"
    assert c["clé".encode("utf-8")] == b"v1"
    c[bytearray("clé".encode("utf-8"))] = b"v2"
    assert c["clé"] == b"v2"
    assert len(c) == 1
    del c[b"cl\xc3\xa9"]
    with pytest.raises(KeyError):
        c["clé"]


def test_object_code_stored_as_its_bytes(cache_dir, tmp_path):
    core = cuda_core()
    c = kcache.ProgramCache(cache_dir)
    c[b"obj"] = core.ObjectCode.from_cubin(b"\x7fELF cubin bytes")
    assert c[b"obj"] == b"\x7fELF cubin bytes"
    path = tmp_path / "k.cubin"
    path.write_bytes(b"\x7fELF from a file")
    c[b"file"] = core.ObjectCode.from_cubin(str(path))
    path.unlink()  # the bytes were taken at write time, not the path
    assert c[b"file"] == b"\x7fELF from a file"


def _child(code, cache_dir):
    return subprocess.run([sys.executable, "-c", code, str(cache_dir)], capture_output=True,
                          text=True, timeout=120)


def test_persistent_across_processes(cache_dir):
    w = _child("import sys, kcache\n"
               "c = kcache.ProgramCache(sys.argv[1])\n"
               "c[b'persist'] = b'x' * 100000\n"
               "c['other'] = b'y'\n", cache_dir)
    assert w.returncode == 0, w.stderr
    r = _child("import sys, kcache\n"
               "c = kcache.ProgramCache(sys.argv[1])\n"
               "assert c[b'persist'] == b'x' * 100000\n"
               "assert c.get('other') == b'y'\n"
               "print(len(c))\n", cache_dir)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "2"


def test_lru_under_a_cap(cache_dir):
    value = lambda i: bytes([i]) * (64 * KiB)
    c = kcache.ProgramCache(cache_dir, max_size_bytes=3 * 64 * KiB)
    c[b"k0"] = value(0)
    c[b"k1"] = value(1)
    c[b"k2"] = value(2)
    import time

    time.sleep(0.01)  # times of use are in milliseconds
    assert c[b"k0"] == value(0)  # k0 is now the most recently read
    time.sleep(0.01)
    c[b"k3"] = value(3)  # over the cap: the least recently read (k1) goes
    assert len(c) == 3
    assert c.get(b"k1") is None
    assert c[b"k0"] == value(0) and c[b"k2"] == value(2) and c[b"k3"] == value(3)
    # Entries of other namespaces are not this cache's to evict.
    other = kcache.Cache(cache_dir)
    other.put("mine", b"keep", b"z" * (256 * KiB))
    c[b"k4"] = value(4)
    assert other.get("mine", b"keep") == b"z" * (256 * KiB)
    assert len(c) == 3


def _writer_one_key(cache_dir, me, rounds, out):
    c = kcache.ProgramCache(cache_dir)
    # Each process's value is whole when its digest (last 32 bytes) matches its body.
    body = bytes([me]) * (200 * KiB + me)
    mine = body + hashlib.sha256(body).digest()
    bad = 0
    for i in range(rounds):
        c[b"shared"] = mine
        got = c.get(b"shared")
        if got is None or hashlib.sha256(got[:-32]).digest() != got[-32:]:
            bad += 1
    out.put(bad)


def _writer_many_keys(cache_dir, me, n, out):
    c = kcache.ProgramCache(cache_dir)
    for i in range(n):
        c[b"p%d-k%d" % (me, i)] = b"%d:%d:" % (me, i) + bytes(4 * KiB)
    out.put(me)


def test_eight_processes_one_key(cache_dir):
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_writer_one_key, args=(str(cache_dir), me, 40, out))
             for me in range(8)]
    for p in procs:
        p.start()
    bad = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert bad == [0] * 8, "torn or lost reads per process: %r" % bad
    got = kcache.ProgramCache(cache_dir)[b"shared"]
    assert hashlib.sha256(got[:-32]).digest() == got[-32:]


def test_eight_processes_many_keys(cache_dir):
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    n = 60
    procs = [ctx.Process(target=_writer_many_keys, args=(str(cache_dir), me, n, out))
             for me in range(8)]
    for p in procs:
        p.start()
    done = sorted(out.get(timeout=300) for _ in procs)
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert done == list(range(8))
    c = kcache.ProgramCache(cache_dir)
    assert len(c) == 8 * n, "lost writes: %d of %d" % (len(c), 8 * n)
    for me in range(8):
        for i in range(n):
            assert c[b"p%d-k%d" % (me, i)] == b"%d:%d:" % (me, i) + bytes(4 * KiB)


def test_threads_share_one_cache(cache_dir):
    c = kcache.ProgramCache(cache_dir)
    errors = []

    def work(t):
        try:
            for i in range(100):
                c[b"t%d-%d" % (t, i)] = bytes([t]) * 1000
                assert c[b"t%d-%d" % (t, i)] == bytes([t]) * 1000
        except Exception as ex:  # reported below
            errors.append(ex)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(c) == 800


SAXPY = r'''
extern "C" __global__ void saxpy(float a, const float *x, float *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
'''


def _program(core, arch="sm_90"):
    return core.Program(SAXPY, code_type="c++", options=core.ProgramOptions(arch=arch))


def test_program_compile_round_trip(cache_dir):
    core = cuda_core()
    try:
        plain = _program(core).compile("cubin")
    except Exception as ex:  # cuda.core compiles with NVRTC on the CPU; without it, say why
        pytest.skip("cuda.core cannot compile here: %s" % ex)
    with kcache.ProgramCache(cache_dir) as c:
        first = _program(core).compile("cubin", cache=c)
        assert len(c) == 1
        stats = kcache.Cache(cache_dir).stats(kcache.PROGRAM_CACHE_NAMESPACE)
        assert stats["entries"] == 1 and stats["misses"] == 1 and stats["hits"] == 0
        second = _program(core).compile("cubin", cache=c)
        assert bytes(second.code) == bytes(first.code) == bytes(plain.code)
    stats = kcache.Cache(cache_dir).stats(kcache.PROGRAM_CACHE_NAMESPACE)
    assert stats["hits"] == 1
    # A fresh process hits too (the entry is in the file, not in memory).
    r = subprocess.run([sys.executable, "-c",
                        "import sys, kcache, cuda.core as core\n"
                        "src = sys.stdin.read()\n"
                        "p = core.Program(src, code_type='c++', options=core.ProgramOptions(arch='sm_90'))\n"
                        "o = p.compile('cubin', cache=kcache.ProgramCache(sys.argv[1]))\n"
                        "sys.stdout.buffer.write(bytes(o.code))\n", str(cache_dir)],
                       input=SAXPY.encode(), capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == bytes(plain.code)
    assert kcache.Cache(cache_dir).stats(kcache.PROGRAM_CACHE_NAMESPACE)["hits"] == 2


def test_cli_sees_python_entries(cache_dir):
    c = kcache.ProgramCache(cache_dir)
    c[b"from-python"] = b"P" * 5000
    c["second"] = b"Q"
    c.close()
    ls = json.loads(run_cli("ls", "--namespace", "cuda.core", "--json", cache_dir=cache_dir).stdout)
    keys = {e["key"] for e in ls["entries"]}
    assert keys == {kcache.key_of("cuda.core", b"from-python"), kcache.key_of("cuda.core", "second")}
    assert all(e["kind"] == "data" and e["arch"] == "cuda.core" for e in ls["entries"])
    st = json.loads(run_cli("stats", "--namespace", "cuda.core", "--json", cache_dir=cache_dir).stdout)
    assert st["entries"] == 2 and st["raw_bytes"] == 5001
    got = subprocess.run([os.environ["KCACHE_EXE"], "get", kcache.key_of("cuda.core", b"from-python")],
                         env={**os.environ, "KCACHE_DIR": str(cache_dir)}, capture_output=True,
                         timeout=60)
    assert got.returncode == 0 and got.stdout == b"P" * 5000, got.stderr
    # What the CLI prunes is gone for Python too.
    run_cli("prune", "--namespace", "cuda.core", "--older-than", "0s", cache_dir=cache_dir)
    assert len(kcache.ProgramCache(cache_dir)) == 0

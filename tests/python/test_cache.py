"""kcache.Cache and kcache.compile: namespaces, stats, prune, verify, bundles, the
remote tier, the CLI's entries seen from Python, errors, and the GIL."""
import json
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest

import kcache
from conftest import FILL, SOURCE_ROOT, needs_toolkit, run_cli

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pyhelp"))
from kctest import redis_on_loopback  # noqa: E402


def test_namespaces_apart(cache_dir):
    with kcache.Cache(cache_dir) as c:
        c.put("alpha", b"k", b"a-value")
        c.put("beta", b"k", b"b-value")
        assert c.get("alpha", "k") == b"a-value"
        assert c.get("beta", "k") == b"b-value"
        assert c.get("gamma", "k") is None
        assert c.get("gamma", "k", b"dflt") == b"dflt"
        assert c.delete("alpha", "k") is True
        assert c.delete("alpha", "k") is False
        assert c.get("beta", "k") == b"b-value"
        assert c.path == os.path.join(str(cache_dir), "kcache.db")


def test_errors_carry_the_librarys_message(cache_dir):
    c = kcache.Cache(cache_dir)
    with pytest.raises(kcache.Error) as e:
        c.put("not a namespace", b"k", b"v")
    assert "namespace 'not a namespace' must be 1 to 31" in str(e.value)
    assert e.value.status == -2 and e.value.status_name == "invalid argument"
    with pytest.raises(kcache.Error):
        c.put("x" * 32, b"k", b"v")
    with pytest.raises(TypeError):
        c.put("ns", 3, b"v")
    # A cache that cannot be opened says why, with the path.
    blocker = cache_dir / "file"
    blocker.write_text("not a directory")
    with pytest.raises(kcache.Error) as e:
        kcache.Cache(blocker / "sub")
    assert str(blocker) in str(e.value)
    # Another application's SQLite file is refused and left alone.
    import sqlite3

    foreign = cache_dir / "foreign.db"
    db = sqlite3.connect(foreign)
    db.execute("CREATE TABLE t (x)")
    db.commit()
    db.close()
    before = foreign.read_bytes()
    with pytest.raises(kcache.Error) as e:
        kcache.Cache(foreign)
    assert e.value.status == -7 and foreign.read_bytes() == before


def test_stats_prune_verify(cache_dir):
    c = kcache.Cache(cache_dir)
    for i in range(20):
        c.put("ns", b"k%d" % i, bytes([i]) * 10000)
    c.get("ns", b"k1")
    c.get("ns", b"missing")
    s = c.stats("ns")
    assert s == {"entries": 20, "raw_bytes": 200000, "stored_bytes": s["stored_bytes"],
                 "hits": 1, "misses": 1}
    whole = c.stats()
    assert whole["entries"] == 20 and whole["schema_version"] >= 5
    assert any(u["arch"] == "ns" and u["kind"] == "data" for u in whole["usage"])
    v = c.verify()
    assert v["entries"] == 20 and v["damaged"] == 0 and v["integrity_ok"]
    # A count that does not fit is refused, never wrapped into another (2^64+3 read as 3).
    for bad in (-1, 2**64, 2**64 + 3):
        with pytest.raises(OverflowError):
            c.prune(max_entries=bad)
    assert c.prune(max_entries=2**64 - 1)["evicted"] == 0 and c.stats("ns")["entries"] == 20
    r = c.prune(max_entries=5)
    assert r["evicted"] == 15 and c.stats("ns")["entries"] == 5
    # A handle's use stamps run ahead of the clock by a millisecond per use
    # beyond one a millisecond (lib/store/hitlog.c); "unused for 0 s" is measured
    # once the clock has passed the burst of uses above.
    time.sleep(0.1)
    r = c.prune(older_than=0, namespace="ns")
    assert r["evicted"] == 5 and c.stats("ns")["entries"] == 0
    with pytest.raises(ValueError):
        c.prune(namespace="ns")


def test_bundles(cache_dir, tmp_path):
    a = kcache.Cache(cache_dir)
    a.put("cuda.core", b"k1", b"one")
    a.put("cuda.core", b"k2", b"two")
    a.put("triton", b"k1", b"tri")
    r = a.export_bundle(tmp_path / "b.kcache", namespace="cuda.core")
    assert r["entries"] == 2
    b = kcache.Cache(tmp_path / "other")
    assert b.import_bundle(tmp_path / "b.kcache", dry_run=True)["added"] == 2
    assert b.get("cuda.core", b"k1") is None
    assert b.import_bundle(tmp_path / "b.kcache")["added"] == 2
    assert b.get("cuda.core", b"k2") == b"two"
    assert b.get("triton", b"k1") is None
    # The CLI imports what Python exported, and Python reads what the CLI imported.
    run_cli("import", tmp_path / "b.kcache", cache_dir=tmp_path / "third")
    assert kcache.Cache(tmp_path / "third").get("cuda.core", b"k1") == b"one"


def test_python_sees_entries_written_outside(cache_dir):
    """kcache-fill writes through the C API; the Python module reads them back."""
    if not FILL:
        pytest.skip("KCACHE_FILL not set")
    os.makedirs(cache_dir, exist_ok=True)
    p = subprocess.run([FILL, str(cache_dir / "kcache.db"), "3", "--namespace", "triton",
                        "--size", "777", "--seed", "9"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    keys = p.stdout.split()
    c = kcache.Cache(cache_dir)
    for i, hexkey in enumerate(keys):
        assert kcache.key_of("triton", "key-9-%d" % i) == hexkey
        assert len(c.get("triton", "key-9-%d" % i)) == 777


@needs_toolkit
def test_python_sees_the_clis_compiles(cache_dir):
    saxpy = os.path.join(SOURCE_ROOT, "examples", "saxpy.cu")
    out = run_cli("compile", saxpy, "--arch", "sm_90", "--json", cache_dir=cache_dir).stdout
    item = json.loads(out)["items"][0]
    assert item["outcome"] == "miss"
    r = kcache.compile(path=saxpy, arch="sm_90", cache=cache_dir)
    assert r.hit, "the CLI's compile is not a hit from Python: %r" % r
    assert r.key == item["key"]
    # And the other way: the CLI hits what Python compiled.
    kcache.compile(path=saxpy, arch="sm_80", cache=cache_dir)
    out = run_cli("compile", saxpy, "--arch", "sm_80", "--json", cache_dir=cache_dir).stdout
    assert json.loads(out)["items"][0]["outcome"] == "hit"


@needs_toolkit
def test_compile_headers_and_names(cache_dir):
    src = ('#include "scale.h"\n'
           'template <typename T> __global__ void scale(T *x) { x[threadIdx.x] *= FACTOR; }\n')
    names = ["scale<float>", "scale<double>"]
    r1 = kcache.compile(src, arch="sm_90", headers={"scale.h": "#define FACTOR 2\n"},
                        name_expressions=names, cache=cache_dir, name="scale.cu")
    assert not r1.hit and r1.kind == "cubin" and r1.data[:4] == b"\x7fELF"
    assert set(r1.lowered_names) == set(names)
    assert r1.lowered_names["scale<float>"].startswith("_Z")
    r2 = kcache.compile(src, arch="sm_90", headers={"scale.h": "#define FACTOR 2\n"},
                        name_expressions=names, cache=cache_dir, name="scale.cu")
    assert r2.hit and r2.key == r1.key and r2.data == r1.data
    assert r2.lowered_names == r1.lowered_names
    # A header's content is part of the key: another header, another entry.
    r3 = kcache.compile(src, arch="sm_90", headers={"scale.h": "#define FACTOR 3\n"},
                        name_expressions=names, cache=cache_dir, name="scale.cu")
    assert not r3.hit and r3.key != r1.key and r3.data != r1.data
    # PTX, and a header found on disk through include_paths.
    inc = cache_dir / "inc"
    inc.mkdir()
    (inc / "k.h").write_text("#define K 7\n")
    r4 = kcache.compile('#include "k.h"\nextern "C" __global__ void f(int *x) { *x = K; }\n',
                        arch="compute_90", include_paths=[inc], cache=cache_dir)
    assert r4.kind == "ptx" and b".entry f" in r4.data
    (inc / "k.h").write_text("#define K 8\n")
    r5 = kcache.compile('#include "k.h"\nextern "C" __global__ void f(int *x) { *x = K; }\n',
                        arch="compute_90", include_paths=[inc], cache=cache_dir)
    assert not r5.hit and r5.key != r4.key


@needs_toolkit
def test_compile_error_has_the_log(cache_dir):
    with pytest.raises(kcache.CompileError) as e:
        kcache.compile("__global__ void broken( {", arch="sm_90", cache=cache_dir)
    assert "error" in e.value.log
    assert e.value.status == -11
    # What is wrong is in the message itself, not only in .log.
    first = next(l for l in e.value.log.splitlines() if "error" in l)
    assert first in str(e.value), str(e.value)
    with pytest.raises(kcache.Error) as e:
        kcache.compile("__global__ void k() {}", arch="sm_999", cache=cache_dir)
    assert "sm_999 is not an architecture this NVRTC knows: sm_" in str(e.value), str(e.value)
    with pytest.raises(TypeError):
        kcache.compile(arch="sm_90")
    with pytest.raises(ValueError):
        kcache.compile("x", arch="sm_90", output="sass")


@needs_toolkit
def test_compile_releases_the_gil(cache_dir):
    """Other Python threads run while NVRTC compiles."""
    ticks = 0
    done = threading.Event()

    def count():
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            time.sleep(0.001)

    t = threading.Thread(target=count)
    t.start()
    t0 = time.monotonic()
    kcache.compile('extern "C" __global__ void g(float *x) { x[0] = 1; }', arch="sm_90",
                   cache=cache_dir, no_cache=True)
    elapsed = time.monotonic() - t0
    done.set()
    t.join()
    # The counter sleeps 1 ms a turn: with the GIL held by the compile it would not
    # turn at all. A loaded machine stretches each turn, so ask for a few only.
    assert ticks >= max(5, elapsed * 1000 * 0.05), (ticks, elapsed)


def test_close_while_other_threads_call(cache_dir):
    c = kcache.Cache(cache_dir)
    c.put("ns", b"k", b"v" * 100000)
    errors = []

    def reader():
        for _ in range(2000):
            try:
                assert c.get("ns", b"k") == b"v" * 100000
            except ValueError:
                return  # closed: the documented outcome
            except Exception as ex:
                errors.append(ex)
                return

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.01)
    c.close()
    for t in threads:
        t.join()
    assert not errors
    with pytest.raises(ValueError):
        c.get("ns", b"k")


def test_remote_tier(cache_dir, tmp_path):
    """Python's entries go through the remote like any: push from one cache, pull into another."""
    with redis_on_loopback(tmp_path) as server:
        if not server:
            pytest.skip("redis-server is not installed")
        url, _ = server
        a = kcache.Cache(cache_dir)
        a.put("cuda.core", b"remote-key", b"R" * 3000)
        a.close()
        run_cli("remote", "push", "--remote", url, cache_dir=cache_dir)
        run_cli("remote", "pull", "--remote", url, cache_dir=tmp_path / "b")
        assert kcache.Cache(tmp_path / "b").get("cuda.core", b"remote-key") == b"R" * 3000
        # Live, as a compile uses it: a ProgramCache put is pushed, another machine's
        # (another cache's) local miss is served by the remote and kept locally.
        os.environ["KCACHE_REMOTE"] = url
        try:
            kcache.ProgramCache(tmp_path / "m1")[b"live"] = b"L" * 4000
            c2 = kcache.ProgramCache(tmp_path / "m2")
            assert c2[b"live"] == b"L" * 4000
            assert len(c2) == 1  # now in m2's own file
            with pytest.raises(KeyError):
                c2[b"nobody-put-this"]
        finally:
            del os.environ["KCACHE_REMOTE"]
        assert kcache.Cache(tmp_path / "m2", remote="").get("cuda.core", b"live") == b"L" * 4000
        # A remote URL that cannot be used is an error saying why.
        with pytest.raises(kcache.Error):
            kcache.Cache(tmp_path / "m3", remote="ftp://not-a-remote")


def test_module_shares_the_processes_sqlite():
    # The module links its other libraries in, but not SQLite: the drop-in
    # NVRTC in the same process (kcache run) uses the shared one, and two
    # copies of SQLite on one file drop each other's POSIX locks on close.
    nm = shutil.which("nm")
    if not nm:
        pytest.skip("no nm (binutils) here")
    undefined = subprocess.run([nm, "-D", "--undefined-only", kcache._kcache.__file__],
                               capture_output=True, text=True, check=True).stdout
    assert " sqlite3_open_v2" in undefined, "the module carries its own SQLite"


def test_sizes_read_as_the_cli_reads_them(cache_dir):
    """Cache(max_size="1G") and prune(max_size="512M"): the CLI's grammar, a bare number GiB."""
    c = kcache.Cache(cache_dir, max_size="1G")
    assert c.stats()["max_size"] == 1 << 30
    c.close()
    c = kcache.Cache(cache_dir, max_size="1.5GiB")
    assert c.stats()["max_size"] == 3 << 29
    c.close()
    c = kcache.Cache(cache_dir, max_size="2")
    assert c.stats()["max_size"] == 2 << 30, "a bare number is GiB, as in the CLI"
    c.close()
    c = kcache.Cache(cache_dir, max_size="none")
    assert c.stats()["max_size"] is None, "none: no cap, as in the CLI"
    c.put("ns", b"k", b"x" * 4096)
    assert c.prune(max_size="1M")["evicted"] == 0
    c.close()
    for bad in ("-5G", "1e9", "5 apples", "0x10", ""):
        with pytest.raises(ValueError, match="not a size"):
            kcache.Cache(cache_dir, max_size=bad)
    assert kcache.Cache(cache_dir, max_size=4096).stats()["max_size"] == 4096, "ints stay bytes"


def test_the_module_shows_its_own_names():
    """dir(kcache): the API, not the modules and helpers it uses."""
    names = dir(kcache)
    for leaked in ("os", "time", "allocate_lock", "annotations", "TYPE_CHECKING"):
        assert leaked not in names, names
    for name in kcache.__all__:
        assert name in names
    assert not [n for n in names if not n.startswith("__") and n not in kcache.__all__
                and n not in ("PROGRAM_CACHE_NAMESPACE", "triton")], names


def test_repr_names_the_file(cache_dir):
    c = kcache.Cache(cache_dir)
    assert repr(c) == "kcache.Cache(%r)" % os.path.join(str(cache_dir), "kcache.db")
    c.close()


def _one_compile_twice(**kw):
    """Two compiles at one place in the code, warnings as a program sees them by default."""
    import warnings
    src = "__global__ void k(int *x) { x[0] = 42; }\n"
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")
        results = [kcache.compile(src, arch="sm_90", **kw) for _ in range(2)]
    return results, [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)]


@needs_toolkit
def test_unusable_cache_warns_and_compiles(tmp_path):
    """A cache directory that cannot be made: the kernel, and one warning saying why."""
    (tmp_path / "a file").write_text("")
    results, warned = _one_compile_twice(cache=tmp_path / "a file" / "cache")
    assert all(r.data and not r.hit for r in results)
    assert len(warned) == 1 and "not cached" in warned[0] and "a file" in warned[0], warned


@needs_toolkit
def test_remote_down_warns_and_compiles(cache_dir, monkeypatch):
    """A remote nobody answers at: the kernel, and one warning; the local cache still works."""
    monkeypatch.setenv("KCACHE_REMOTE", "redis://127.0.0.1:1")
    results, warned = _one_compile_twice(cache=cache_dir)
    assert results[0].data and results[1].hit, results
    assert len(warned) == 1 and "127.0.0.1:1" in warned[0], warned


@needs_toolkit
def test_pip_cuda_found_without_a_toolkit(tmp_path, cache_dir):
    """pip's CUDA only (nvidia/cu13 with NVRTC and headers, as PyTorch's wheels bring it),
    CUDA_HOME pointing nowhere: kcache.compile finds pip's NVRTC and headers itself."""
    from conftest import TOOLKIT
    site = tmp_path / "site-packages"
    cu = site / "nvidia" / "cu13"
    (cu / "lib").mkdir(parents=True)
    real = os.path.realpath(os.path.join(TOOLKIT, "lib64"))
    for name in os.listdir(real):
        if name.startswith(("libnvrtc.so", "libnvrtc-builtins.so")):
            shutil.copy(os.path.join(real, name), cu / "lib" / name)
    shutil.copytree(os.path.join(TOOLKIT, "include"), cu / "include", symlinks=True)
    code = ("import kcache, sys\n"
            "r = kcache.compile('__global__ void k(int *x) { x[0] = 9; }', arch='sm_90',"
            " cache=sys.argv[1])\n"
            "print(r.kind, len(r.data) > 0)\n"
            "try:\n"
            "    kcache.compile('#include <cuda_fp16.h>\\n__global__ void k(__half *x)"
            " { x[0] = __float2half(1.0f); }', arch='sm_90', cache=sys.argv[1])\n"
            "except kcache.CompileError as e:\n"
            "    print(str(e).split('add -I ')[-1])\n")
    env = dict(os.environ, CUDA_HOME="/opt/none", CUDA_PATH="/opt/none",
               PYTHONPATH=os.pathsep.join([os.environ.get("PYTHONPATH", ""), str(site)]))
    p = subprocess.run([sys.executable, "-c", code, str(cache_dir)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stdout.split()[:2] == ["cubin", "True"], p.stderr[-2000:]
    assert p.stdout.split()[2] == str(cu / "include"), "the hint names pip's headers: %r" % p.stdout
    entries = json.loads(run_cli("ls", "--json", cache_dir=cache_dir).stdout)["entries"]
    assert len(entries) == 1, "stored, as any compile: %s" % entries

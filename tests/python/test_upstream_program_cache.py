"""cuda.core's own program-cache tests that hold for any backend, run against kcache.ProgramCache.

A port in our words, not a copy: each test keeps the upstream test's name and
what it asserts, with the cache under test built by ``make`` (a
kcache.ProgramCache over a directory) where upstream builds a
FileStreamProgramCache or an InMemoryProgramCache. Upstream's module cannot be
parametrised over a backend: it names those classes in every test and reaches
into their private helpers.

Ported from NVIDIA/cuda-python (Apache-2.0):
  cuda_core/tests/test_program_cache.py               (commit 0193409dfeee2c590995977472a07c72cf6851e4)
  cuda_core/tests/test_program_cache_multiprocess.py  (commit 03c2e7f561575bb9cf0cdf68820ce57f6dcec658)
  cuda_core/tests/test_program_compile_cache.py       (commit f4bc5f66e10a2cd7f7db46831cf4a21351edd952)

Upstream tests left out, and why (they test something other than a backend's
behaviour as a caller sees it):
  - test_program_cache_resource_* (is_abstract, requires_core_methods,
    default_get_*, close_is_noop_by_default, context_manager_closes): the ABC's
    own defaults, on an empty subclass (test_is_cuda_cores_resource in
    test_program_cache.py checks that ProgramCache is one);
  - test_make_program_cache_key_* (about 45): key derivation, not storage;
  - FileStream's Windows and rename mechanics: *_retries_on_sharing_violation,
    *_permission_error_*, *_unlink_*, test_is_windows_sharing_violation_predicate,
    *_eviction_propagates_*, test_filestream_cache_atomic_no_half_written_file
    (patches os.replace, which kcache does not call: its write is one SQLite
    transaction, tested by the torn-read tests below and in test_program_cache.py);
  - FileStream's directory layout and helpers: prune_only_if_stat_unchanged,
    touch_atime_only_if_stat_unchanged, recreates_tmp_dir_if_missing,
    sweeps_stale_tmp_files_on_open, clear_preserves_young_tmp_files,
    clear_does_not_unlink_replaced_file, clear_does_not_break_concurrent_writer,
    size_cap_does_not_unlink_replaced_file, size_cap_counts_tmp_files,
    writes_skip_scan_when_under_cap, writes_trigger_scan_when_over_cap,
    tracker_reconciles_after_external_drift, tracker_clamps_at_zero_under_delete_race,
    test_default_cache_dir_lives_under_user_cache_root (FileStream's own directory);
  - test_program_compile_cache.py's tests on its recording stub (they test
    Program.compile's wrapper, not a cache) and test_cache_roundtrip_with_real_compilation
    (needs a GPU for get_kernel; test_gpu.py loads a kcache-cached kernel instead).
Where an upstream test also reads FileStream's entry file from disk (the bytes
verbatim, one file after an overwrite), the port asserts the same of the store
through kcache.Cache: the namespace holds that many entries, of those bytes.
"""
import multiprocessing as _mp
import threading
import time

import pytest

import kcache
from conftest import cuda_core


@pytest.fixture(autouse=True)
def _needs_cuda_core():
    cuda_core()


def make(root, **kw):
    return kcache.ProgramCache(root, **kw)


def _fake_object_code(payload=b"fake-cubin", name="unit"):
    from cuda.core._module import ObjectCode

    return ObjectCode._init(payload, "cubin", name=name)


def _stored(root):
    """(entries, raw bytes) of the ProgramCache namespace, as the store counts them."""
    with kcache.Cache(root) as c:
        st = c.stats(kcache.PROGRAM_CACHE_NAMESPACE)
    return st["entries"], st["raw_bytes"]


# ---- test_program_cache.py: FileStreamProgramCache, single process ----------------------


def test_filestream_cache_empty_on_create(tmp_path):
    with make(tmp_path / "fc") as cache:
        assert len(cache) == 0
        assert cache.get(b"nope") is None
        with pytest.raises(KeyError):
            cache[b"nope"]


def test_filestream_cache_roundtrip(tmp_path):
    with make(tmp_path / "fc") as cache:
        cache[b"k1"] = _fake_object_code(b"v1", name="x")
        assert cache.get(b"k1") is not None
        assert cache[b"k1"] == b"v1"


def test_filestream_cache_delete(tmp_path):
    with make(tmp_path / "fc") as cache:
        cache[b"k"] = _fake_object_code()
        del cache[b"k"]
        assert cache.get(b"k") is None
        with pytest.raises(KeyError):
            del cache[b"k"]


def test_filestream_cache_overwrite_replaces_value(tmp_path):
    root = tmp_path / "fc-overwrite"
    with make(root) as cache:
        cache[b"k"] = b"x" * 100
        assert cache[b"k"] == b"x" * 100
        cache[b"k"] = b"y" * 50
        assert cache[b"k"] == b"y" * 50
        assert len(cache) == 1
    # Upstream counts entry files on disk; here, the store's own count and bytes.
    assert _stored(root) == (1, 50)


def test_filestream_cache_len_counts_all(tmp_path):
    with make(tmp_path / "fc") as cache:
        cache[b"a"] = _fake_object_code(b"1")
        cache[b"b"] = _fake_object_code(b"2")
        cache[b"c"] = _fake_object_code(b"3")
        assert len(cache) == 3


def test_filestream_cache_clear(tmp_path):
    with make(tmp_path / "fc") as cache:
        cache[b"a"] = _fake_object_code()
        cache.clear()
        assert len(cache) == 0


def test_filestream_cache_persists_across_reopen(tmp_path):
    root = tmp_path / "fc"
    with make(root) as cache:
        cache[b"k"] = _fake_object_code(b"persisted")
    with make(root) as cache:
        assert cache[b"k"] == b"persisted"


def test_filestream_cache_returns_bytes_verbatim(tmp_path):
    root = tmp_path / "fc"
    payload = b"\x7fELF\x02\x01\x01\x00" + b"\xab" * 256
    with make(root) as cache:
        cache[b"k"] = payload
        assert cache[b"k"] == payload
    # Upstream reads the entry file; the store keeps the bytes compressed, so:
    # one entry, of exactly the payload's size, read back from a fresh handle.
    assert _stored(root) == (1, len(payload))
    with make(root) as cache:
        assert cache[b"k"] == payload


def test_filestream_cache_accepts_bytes_directly(tmp_path):
    with make(tmp_path / "fc") as cache:
        cache[b"k"] = b"raw"
        assert cache[b"k"] == b"raw"


def test_filestream_cache_accepts_bytearray_and_memoryview(tmp_path):
    with make(tmp_path / "fc") as cache:
        cache[b"a"] = bytearray(b"ba")
        cache[b"b"] = memoryview(b"mv")
        assert cache[b"a"] == b"ba"
        assert cache[b"b"] == b"mv"


def test_filestream_cache_rejects_non_bytes_non_object_code(tmp_path):
    with make(tmp_path / "fc") as cache, pytest.raises(TypeError, match="bytes-like or ObjectCode"):
        cache[b"k"] = "a string"


def test_filestream_cache_accepts_path_backed_object_code(tmp_path):
    from cuda.core._module import ObjectCode

    src = tmp_path / "src.cubin"
    src.write_bytes(b"hello-cubin-bytes")
    path_backed = ObjectCode.from_cubin(str(src), name="x")
    with make(tmp_path / "fc") as cache:
        cache[b"k"] = path_backed
        assert cache[b"k"] == b"hello-cubin-bytes"
    src.unlink()
    with make(tmp_path / "fc") as cache:
        assert cache[b"k"] == b"hello-cubin-bytes"


def test_filestream_cache_path_backed_object_code_missing_file_message(tmp_path):
    from cuda.core._module import ObjectCode

    src = tmp_path / "vanished.cubin"
    src.write_bytes(b"data")
    path_backed = ObjectCode.from_cubin(str(src), name="gone")
    src.unlink()
    with make(tmp_path / "fc-missing") as cache:
        with pytest.raises(FileNotFoundError, match="path-backed ObjectCode") as excinfo:
            cache[b"k"] = path_backed
        assert cache.get(b"k") is None
    assert str(src) in str(excinfo.value)


def test_program_cache_resource_update_accepts_mapping_and_pairs(tmp_path):
    with make(tmp_path / "fc-mapping") as cache:
        cache.update({b"a": b"v-a", b"b": b"v-b"})
        assert cache[b"a"] == b"v-a"
        assert cache[b"b"] == b"v-b"
    with make(tmp_path / "fc-pairs") as cache:
        cache.update([(b"x", b"v-x"), (b"y", b"v-y")])
        assert cache[b"x"] == b"v-x"
        assert cache[b"y"] == b"v-y"


def test_filestream_cache_input_forms_are_byte_equivalent(tmp_path):
    from cuda.core._module import ObjectCode

    payload = b"\x7fELF\x02\x01\x01\x00fake-cubin-bytes"
    src = tmp_path / "src.cubin"
    src.write_bytes(payload)
    inputs = {
        b"raw-bytes": payload,
        b"bytearray": bytearray(payload),
        b"memoryview": memoryview(payload),
        b"obj-bytes-backed": ObjectCode._init(payload, "cubin", name="x"),
        b"obj-path-backed": ObjectCode.from_cubin(str(src), name="y"),
    }
    root = tmp_path / "fc"
    with make(root) as cache:
        cache.update(inputs)
        for k in inputs:
            assert cache[k] == payload, k
    assert _stored(root) == (len(inputs), len(inputs) * len(payload))


@pytest.mark.parametrize("bad", [-1, 0])
def test_filestream_cache_rejects_non_positive_size_cap(tmp_path, bad):
    with pytest.raises(ValueError, match="positive"):
        make(tmp_path / "fc", max_size_bytes=bad)


def test_filestream_cache_uses_default_dir_when_path_omitted(tmp_path, monkeypatch):
    # Upstream points its default directory elsewhere; kcache's default is the
    # user's kcache cache, which KCACHE_DIR names.
    monkeypatch.setenv("KCACHE_DIR", str(tmp_path / "default-fc"))
    with kcache.ProgramCache() as cache:
        cache[b"k"] = b"hello"
        assert cache[b"k"] == b"hello"
    assert (tmp_path / "default-fc" / "kcache.db").is_file()


def test_filestream_cache_handles_long_keys(tmp_path):
    long_bytes_key = b"x" * 4096
    long_str_key = "y" * 4096
    with make(tmp_path / "fc") as cache:
        cache[long_bytes_key] = _fake_object_code(b"b", name="nb")
        cache[long_str_key] = _fake_object_code(b"s", name="ns")
        assert cache.get(long_bytes_key) is not None
        assert cache.get(long_str_key) is not None
        assert cache[long_bytes_key] == b"b"
        assert cache[long_str_key] == b"s"


def test_filestream_cache_accepts_str_keys(tmp_path):
    with make(tmp_path / "fc") as cache:
        cache["my-key"] = _fake_object_code(b"v")
        assert cache.get("my-key") is not None
        assert cache.get(b"my-key") is not None


def test_filestream_cache_size_cap_evicts_oldest(tmp_path):
    cap = 3000
    root = tmp_path / "fc"
    with make(root, max_size_bytes=cap) as cache:
        cache[b"a"] = b"A" * 2000
        time.sleep(0.02)
        cache[b"b"] = b"B" * 2000
        time.sleep(0.02)
        cache[b"c"] = b"C" * 2000
    with make(root, max_size_bytes=cap) as cache:
        assert cache.get(b"a") is None
        assert cache.get(b"c") is not None


def test_filestream_cache_atime_lru_promotes_recently_read(tmp_path):
    cap = 5000
    root = tmp_path / "fc"
    with make(root, max_size_bytes=cap) as cache:
        cache[b"a"] = b"A" * 2000
        time.sleep(0.02)
        cache[b"b"] = b"B" * 2000
        time.sleep(0.02)
        _ = cache[b"a"]
        time.sleep(0.02)
        cache[b"c"] = b"C" * 2000
    with make(root, max_size_bytes=cap) as cache:
        assert cache.get(b"b") is None
        assert cache.get(b"a") is not None
        assert cache.get(b"c") is not None


def test_filestream_cache_unbounded_by_default(tmp_path):
    with make(tmp_path / "fc") as cache:
        for i in range(20):
            cache[f"k{i}".encode()] = _fake_object_code(b"X" * 1024, name=f"n{i}")
        assert len(cache) == 20


# ---- test_program_cache.py: InMemoryProgramCache's tests of the protocol ----------------
# Upstream's in-memory cache takes no path; here each gets a directory of its own.


def test_inmemory_cache_empty_on_create(tmp_path):
    cache = make(tmp_path)
    assert len(cache) == 0
    assert cache.get(b"nope") is None
    with pytest.raises(KeyError):
        cache[b"nope"]


def test_inmemory_cache_roundtrip_object_code(tmp_path):
    cache = make(tmp_path)
    cache[b"k1"] = _fake_object_code(b"v1", name="x")
    assert cache.get(b"k1") is not None
    assert cache[b"k1"] == b"v1"


def test_inmemory_cache_accepts_bytes_directly(tmp_path):
    cache = make(tmp_path)
    cache[b"k"] = b"raw-payload"
    assert cache[b"k"] == b"raw-payload"


def test_inmemory_cache_accepts_bytearray_and_memoryview(tmp_path):
    cache = make(tmp_path)
    cache[b"a"] = bytearray(b"ba-payload")
    cache[b"b"] = memoryview(b"mv-payload")
    assert cache[b"a"] == b"ba-payload"
    assert cache[b"b"] == b"mv-payload"


def test_inmemory_cache_accepts_path_backed_object_code(tmp_path):
    from cuda.core._module import ObjectCode

    payload = b"\x7fELF\x02\x01fake-cubin-bytes"
    src = tmp_path / "src.cubin"
    src.write_bytes(payload)
    obj = ObjectCode.from_cubin(str(src), name="x")
    cache = make(tmp_path / "c")
    cache[b"k"] = obj
    src.write_bytes(b"changed")
    assert cache[b"k"] == payload


def test_inmemory_cache_str_and_bytes_keys_alias(tmp_path):
    cache = make(tmp_path)
    cache["k"] = b"v"
    assert cache[b"k"] == b"v"
    assert cache.get(b"k") is not None
    assert cache.get("k") is not None


def test_inmemory_cache_rejects_non_str_non_bytes_key(tmp_path):
    cache = make(tmp_path)
    with pytest.raises(TypeError):
        cache[123] = b"v"
    with pytest.raises(TypeError):
        cache[123]
    with pytest.raises(TypeError):
        cache.get(123)


def test_inmemory_cache_rejects_non_bytes_non_object_code_value(tmp_path):
    cache = make(tmp_path)
    with pytest.raises(TypeError):
        cache[b"k"] = "a string"


def test_inmemory_cache_delete(tmp_path):
    cache = make(tmp_path)
    cache[b"k"] = _fake_object_code()
    del cache[b"k"]
    assert cache.get(b"k") is None
    with pytest.raises(KeyError):
        del cache[b"k"]


def test_inmemory_cache_len_counts_all(tmp_path):
    cache = make(tmp_path)
    cache[b"a"] = _fake_object_code(b"1")
    cache[b"b"] = _fake_object_code(b"2")
    cache[b"c"] = _fake_object_code(b"3")
    assert len(cache) == 3


def test_inmemory_cache_clear(tmp_path):
    cache = make(tmp_path)
    cache[b"a"] = _fake_object_code()
    cache[b"b"] = _fake_object_code()
    cache.clear()
    assert len(cache) == 0
    assert cache.get(b"a") is None


def test_inmemory_cache_get_returns_default_on_miss(tmp_path):
    cache = make(tmp_path)
    assert cache.get(b"missing") is None
    assert cache.get(b"missing", b"fallback") == b"fallback"


def test_inmemory_cache_get_returns_value_on_hit(tmp_path):
    cache = make(tmp_path)
    cache[b"k"] = b"v"
    assert cache.get(b"k") == b"v"


def test_inmemory_cache_update_accepts_mapping_and_pairs(tmp_path):
    cache = make(tmp_path / "a")
    cache.update({b"a": b"v-a", b"b": b"v-b"})
    assert cache[b"a"] == b"v-a"
    assert cache[b"b"] == b"v-b"
    cache2 = make(tmp_path / "b")
    cache2.update([(b"x", b"v-x"), (b"y", b"v-y")])
    assert cache2[b"x"] == b"v-x"
    assert cache2[b"y"] == b"v-y"


def test_inmemory_cache_overwrite_replaces_value_and_updates_size(tmp_path):
    cache = make(tmp_path, max_size_bytes=1000)
    cache[b"k"] = b"x" * 100
    assert cache[b"k"] == b"x" * 100
    cache[b"k"] = b"y" * 50
    assert cache[b"k"] == b"y" * 50
    assert len(cache) == 1
    # Upstream reads its private byte count; the store's count of the namespace says the same.
    assert _stored(tmp_path) == (1, 50)


@pytest.mark.parametrize("bad", [-1, 0])
def test_inmemory_cache_rejects_non_positive_size_cap(tmp_path, bad):
    with pytest.raises(ValueError, match="positive"):
        make(tmp_path, max_size_bytes=bad)


def test_inmemory_cache_size_cap_evicts_oldest(tmp_path):
    cache = make(tmp_path, max_size_bytes=250)
    cache[b"a"] = b"a" * 100
    cache[b"b"] = b"b" * 100
    cache[b"c"] = b"c" * 100
    assert cache.get(b"a") is None
    assert cache.get(b"b") is not None
    assert cache.get(b"c") is not None


def test_inmemory_cache_read_promotes_lru(tmp_path):
    cache = make(tmp_path, max_size_bytes=250)
    cache[b"a"] = b"a" * 100
    cache[b"b"] = b"b" * 100
    _ = cache[b"a"]
    cache[b"c"] = b"c" * 100
    assert cache.get(b"a") is not None
    assert cache.get(b"b") is None
    assert cache.get(b"c") is not None


def test_inmemory_cache_oversized_write_evicts_itself(tmp_path):
    cache = make(tmp_path, max_size_bytes=10)
    cache[b"big"] = b"x" * 100
    assert cache.get(b"big") is None
    assert len(cache) == 0


def test_inmemory_cache_unbounded_when_max_size_none(tmp_path):
    cache = make(tmp_path)
    for i in range(50):
        cache[f"k{i}".encode()] = b"x" * 1024
    assert len(cache) == 50


def test_inmemory_cache_concurrent_threads_stay_consistent(tmp_path):
    cache = make(tmp_path, max_size_bytes=4096)
    n_writers = n_readers = 4
    ops_per_thread = 200
    payload = b"v" * 64
    errors = []
    barrier = threading.Barrier(n_writers + n_readers)

    def writer(tid):
        try:
            barrier.wait()
            for i in range(ops_per_thread):
                cache[f"w{tid}-{i}".encode()] = payload
        except BaseException as exc:
            errors.append(exc)

    def reader(tid):
        try:
            barrier.wait()
            for i in range(ops_per_thread):
                cache.get(f"w{i % n_writers}-{i}".encode())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(n_writers)]
    threads += [threading.Thread(target=reader, args=(t,)) for t in range(n_readers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
        assert not t.is_alive(), "thread deadlocked"
    assert errors == []
    # Upstream compares its private totals; the store's count of the namespace is the same check.
    entries, raw = _stored(tmp_path)
    assert raw <= 4096
    assert len(cache) == entries == raw // len(payload)


# ---- test_program_cache_multiprocess.py -----------------------------------------------


def _worker_write(root, key, payload):
    with make(root) as cache:
        cache[key] = payload


def _worker_write_many(root, base, n):
    with make(root) as cache:
        for i in range(n):
            cache[f"proc-{base}-key-{i}".encode()] = f"payload-{base}-{i}".encode()


def _worker_reader(root, key, rounds, result_queue):
    hits = 0
    for _ in range(rounds):
        with make(root) as cache:
            if cache.get(key) is not None:
                hits += 1
    result_queue.put(hits)


def _worker_size_cap_writer(root, prefix, payload, count, max_size_bytes):
    with make(root, max_size_bytes=max_size_bytes) as cache:
        for i in range(count):
            cache[prefix + str(i).encode()] = payload


def _worker_size_cap_rewriter(root, key, payload, max_size_bytes, done_event):
    with make(root, max_size_bytes=max_size_bytes) as cache:
        i = 0
        while not done_event.is_set():
            cache[key] = payload + str(i).encode()
            i += 1
        cache[key] = payload + b"final"


def test_concurrent_writers_same_key_no_corruption(tmp_path):
    root = str(tmp_path / "fc")
    ctx = _mp.get_context("spawn")
    procs = [ctx.Process(target=_worker_write, args=(root, b"shared", f"v{i}".encode() * 64))
             for i in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0, f"worker exited with {p.exitcode}"
    with make(root) as cache:
        got = cache.get(b"shared")
        assert got is not None, "no writer succeeded"
        assert got.startswith(b"v")
        # Whole: one writer's value, not a mix.
        assert got in {f"v{i}".encode() * 64 for i in range(6)}


def test_concurrent_writers_distinct_keys_all_survive(tmp_path):
    root = str(tmp_path / "fc")
    n_procs, per_proc = 4, 25
    ctx = _mp.get_context("spawn")
    procs = [ctx.Process(target=_worker_write_many, args=(root, base, per_proc))
             for base in range(n_procs)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    with make(root) as cache:
        for base in range(n_procs):
            for i in range(per_proc):
                assert cache.get(f"proc-{base}-key-{i}".encode()) is not None


def test_concurrent_reader_never_sees_torn_file(tmp_path):
    root = str(tmp_path / "fc")
    with make(root) as cache:
        cache[b"k"] = b"seed" * 256
    ctx = _mp.get_context("spawn")
    queue = ctx.Queue()
    writer = ctx.Process(target=_worker_write_many, args=(root, 99, 50))
    reader = ctx.Process(target=_worker_reader, args=(root, b"k", 200, queue))
    reader.start()
    writer.start()
    writer.join(timeout=120)
    reader.join(timeout=120)
    assert writer.exitcode == 0
    assert reader.exitcode == 0
    assert queue.get(timeout=5) == 200


def test_concurrent_eviction_does_not_delete_replaced_file(tmp_path):
    root = str(tmp_path / "fc")
    payload = b"X" * 2000
    cap = 5000
    ctx = _mp.get_context("spawn")
    done_event = ctx.Event()
    rewriter = ctx.Process(target=_worker_size_cap_rewriter,
                           args=(root, b"survivor", payload, cap, done_event))
    churner = ctx.Process(target=_worker_size_cap_writer, args=(root, b"churn-", payload, 80, cap))
    rewriter.start()
    churner.start()
    churner.join(timeout=120)
    done_event.set()
    rewriter.join(timeout=120)
    assert rewriter.exitcode == 0
    assert churner.exitcode == 0
    with make(root, max_size_bytes=cap) as cache:
        got = cache.get(b"survivor")
        assert got is not None, "rewriter's entry was evicted by racing churner"
        assert got.endswith(b"final")


# ---- test_program_compile_cache.py: Program.compile(cache=) over a real backend --------

_KERNEL = 'extern "C" __global__ void k() {}'


def test_filestream_hit_returns_byte_equal_object_code(tmp_path):
    # Upstream asks for init_cuda; compiling to a CUBIN for a named arch needs no GPU.
    from cuda.core import Program, ProgramOptions

    program = Program(_KERNEL, "c++", ProgramOptions(arch="sm_80"))
    with make(tmp_path / "fc") as cache:
        first = program.compile("cubin", cache=cache)
    with make(tmp_path / "fc") as cache:
        second = program.compile("cubin", cache=cache)
    assert bytes(second.code) == bytes(first.code)
    assert second.code_type == first.code_type


def test_cache_kwarg_roundtrip_across_reopen(tmp_path, monkeypatch):
    from cuda.core import Program, ProgramOptions
    from cuda.core import _program as _program_module

    init_args = (_KERNEL, "c++", ProgramOptions(arch="sm_80", name="cached_kernel"))
    cache_path = tmp_path / "fc"
    with make(cache_path) as cache:
        first = Program(*init_args).compile("cubin", cache=cache)
    with make(cache_path) as cache:
        program = Program(*init_args)

        def _must_not_recompile(_program, *_args, **_kwargs):
            raise AssertionError("cache miss: reopened cache didn't serve entry")

        monkeypatch.setattr(_program_module, "_program_compile_uncached", _must_not_recompile)
        second = program.compile("cubin", cache=cache)
    assert bytes(second.code) == bytes(first.code)
    assert second.name == "cached_kernel"

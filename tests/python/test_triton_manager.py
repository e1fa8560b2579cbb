"""kcache.triton.CacheManager driven as Triton drives it, without Triton: files, groups, damaged
or hostile group entries, staging and its cleanup, a cache that cannot be used.
(tests/triton/ runs it under the real Triton where that is installed.)"""
import os
import subprocess
import sys
import textwrap

import pytest

import kcache
import kcache.triton as kt

KEY = "7C6XWUACUZ33NH4EFM544VL6FJCDMIQ7EZRCBWHT5YVLVT7I3Z2A"


@pytest.fixture
def tt(monkeypatch, tmp_path, cache_dir):
    """kcache.triton on this test's cache and staging base, reset before and after."""
    stage = tmp_path / "stage base"
    stage.mkdir()
    monkeypatch.setenv("KCACHE_DIR", str(cache_dir))
    monkeypatch.setenv("KCACHE_TRITON_STAGING", str(stage))
    kt._reset()
    yield stage
    kt._reset()


def compile_like_triton(m, name="add_kernel"):
    """What triton.compile does: ask for the group, and on a miss put each stage, then the
    group."""
    if m.get_group(name + ".json") is not None:
        return None
    group = {}
    for ext, data in (("source", "def f(): pass"), ("ttir", "module {}"), ("ptx", ".version 8.7"),
                      ("cubin", b"\x7fELF" + bytes(range(256)) * 40)):
        group["%s.%s" % (name, ext)] = m.put(data, "%s.%s" % (name, ext))
    group[name + ".json"] = m.put('{"name": "%s"}' % name, name + ".json", binary=False)
    m.put_group(name + ".json", group)
    return group


def test_a_group_round_trips_as_one_entry(tt, cache_dir):
    m = kt.CacheManager(KEY)
    assert m.get_group("add_kernel.json") is None
    put = compile_like_triton(m)
    for name, path in put.items():
        assert path.startswith(str(tt) + os.sep) and os.path.basename(path) == name
    # The members are stored only inside the group: one entry per kernel.
    assert kcache.Cache(cache_dir).stats("triton")["entries"] == 1
    got = kt.CacheManager(KEY).get_group("add_kernel.json")
    assert sorted(got) == sorted(put)
    for name in put:
        with open(put[name], "rb") as a, open(got[name], "rb") as b:
            assert a.read() == b.read()
    # A member asked for on its own is found inside its group.
    cubin = kt.CacheManager(KEY).get_file("add_kernel.cubin")
    assert open(cubin, "rb").read().startswith(b"\x7fELF")
    assert kt.CacheManager(KEY).get_file("add_kernel.llir") is None
    # Another key sees nothing of it.
    assert kt.CacheManager(KEY[:-1] + "B").get_group("add_kernel.json") is None
    s = kt.stats()
    assert s["groups_put"] == 1 and s["groups_hit"] == 1 and s["errors"] == 0


def test_a_lone_file_is_its_own_entry(tt):
    m = kt.CacheManager("SOKEY")
    assert m.get_file("cuda_utils.cpython-311-x86_64-linux-gnu.so") is None
    p = m.put(b"\x7fELF module", "cuda_utils.cpython-311-x86_64-linux-gnu.so")
    assert p.endswith(".so") and open(p, "rb").read() == b"\x7fELF module"
    q = kt.CacheManager("SOKEY").get_file("cuda_utils.cpython-311-x86_64-linux-gnu.so")
    assert open(q, "rb").read() == b"\x7fELF module"
    # str data is stored as its UTF-8 bytes, as Triton writes it in text mode.
    r = kt.CacheManager("AT").put('{"configs_timings": "\u00b5s"}', "f.autotune.json", binary=False)
    assert open(r, "rb").read() == '{"configs_timings": "\u00b5s"}'.encode()


def test_a_group_with_a_missing_member_is_a_miss(tt, tmp_path):
    m = kt.CacheManager(KEY)
    group = {"add_kernel.cubin": m.put(b"cubin", "add_kernel.cubin"),
             "add_kernel.json": m.put("{}", "add_kernel.json")}
    # A member Triton names by a path this manager did not hand out, and that is gone.
    group["add_kernel.ptx"] = str(tmp_path / "gone" / "add_kernel.ptx")
    m.put_group("add_kernel.json", group)
    assert kt.CacheManager(KEY).get_group("add_kernel.json") is None
    assert kt.stats()["errors"] == 1


@pytest.mark.parametrize("damage", ["truncated", "no metadata", "escaping name", "dot-dot",
                                    "duplicate", "not a group", "trailing byte"])
def test_a_damaged_group_entry_is_a_miss(tt, cache_dir, damage):
    m = kt.CacheManager(KEY)
    compile_like_triton(m)
    c = kcache.Cache(cache_dir)
    ck = KEY.encode() + b"\0__grp__add_kernel.json"
    blob = c.get("triton", ck)
    members = kt._decode_group(blob)
    assert members is not None
    if damage == "truncated":
        bad = blob[:-7]
    elif damage == "no metadata":
        del members["add_kernel.json"]
        bad = kt._encode_group(members)
    elif damage in ("escaping name", "dot-dot"):
        members["../../escaped" if damage == "escaping name" else ".."] = b"x"
        bad = kt._encode_group(members)
    elif damage == "duplicate":
        one = kt._encode_group({"add_kernel.json": b"{}"})
        bad = one + one[len(kt._GROUP_MAGIC):]
    elif damage == "not a group":
        bad = b"\x7fELF not a group"
    else:
        bad = blob + b"\0"
    c.put("triton", ck, bad)
    c.close()
    kt._reset()
    assert kt.CacheManager(KEY).get_group("add_kernel.json") is None
    assert kt.stats()["damaged"] == 1
    assert not (tt.parent / "escaped").exists()
    assert sorted(os.listdir(tt)) == []  # nothing staged for a damaged entry


def test_staging_is_removed_at_exit_and_a_fork_keeps_its_parents(tmp_path, cache_dir):
    stage = tmp_path / "stage"
    stage.mkdir()
    script = textwrap.dedent("""
        import os, sys
        import kcache.triton as kt
        m = kt.CacheManager("PARENT")
        p = m.put(b"parent bytes", "k.cubin")
        pid = os.fork()
        if pid == 0:
            c = kt.CacheManager("CHILD").put(b"child bytes", "k.cubin")
            assert os.path.dirname(os.path.dirname(c)) != os.path.dirname(os.path.dirname(p))
            sys.exit(0)  # atexit runs in the child too
        _, status = os.waitpid(pid, 0)
        assert status == 0, status
        assert open(p, "rb").read() == b"parent bytes", "the child removed its parent's files"
        print(p)
    """)
    env = dict(os.environ, KCACHE_DIR=str(cache_dir), KCACHE_TRITON_STAGING=str(stage))
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().startswith(str(stage))
    assert os.listdir(stage) == []


def test_stale_staging_of_gone_processes_is_removed(tt):
    uid = os.getuid()
    gone = tt / ("kcache-triton-%d-999999999-5-x" % uid)
    (gone / "KEY").mkdir(parents=True)
    (gone / "KEY" / "a.cubin").write_bytes(b"x")
    reused = tt / ("kcache-triton-%d-%d-1-x" % (uid, os.getppid()))  # a live PID, another start
    reused.mkdir()
    live = tt / ("kcache-triton-%d-%d-%s-x" % (uid, os.getppid(), kt._start_time(os.getppid())))
    live.mkdir()
    foreign = tt / "kcache-triton-notes"
    foreign.mkdir()
    d = kt.staging_dir()
    assert sorted(os.listdir(tt)) == sorted([os.path.basename(d), live.name, foreign.name])
    assert os.stat(d).st_mode & 0o777 == 0o700


def test_an_unusable_staging_setting_falls_back(monkeypatch, tt, tmp_path):
    blocker = tmp_path / "a file"
    blocker.write_text("x")
    xdg = tmp_path / "xdg"
    xdg.mkdir()
    monkeypatch.setenv("KCACHE_TRITON_STAGING", str(blocker))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))
    assert os.path.dirname(kt.staging_dir()) == str(xdg)


def test_a_cache_that_cannot_be_opened_is_reported_once(monkeypatch, tt, tmp_path, caplog):
    blocker = tmp_path / "a file"
    blocker.write_text("x")
    monkeypatch.setenv("KCACHE_DIR", str(blocker / "sub"))
    kt._reset()
    m = kt.CacheManager(KEY)
    assert m.get_group("add_kernel.json") is None
    group = compile_like_triton(m)
    assert open(group["add_kernel.json"]).read() == '{"name": "add_kernel"}'
    assert kt.CacheManager(KEY).get_group("add_kernel.json") is None
    warnings = [r for r in caplog.records if r.name == "kcache.triton"]
    assert len(warnings) == 1 and "cannot open the cache" in warnings[0].getMessage()
    assert kt.stats()["errors"] == 1


class FakeFileCacheManager:
    """Triton's FileCacheManager as far as the pass-through needs it: records the calls."""
    calls: list = []

    def __init__(self, key, override=False, dump=False):
        self.key = key
        self.calls.append(("init", key, override, dump))

    def get_file(self, filename):
        self.calls.append(("get_file", filename))
        return "/triton/own/" + filename

    def put(self, data, filename, binary=True):
        self.calls.append(("put", filename))
        return "/triton/own/" + filename

    def get_group(self, filename):
        self.calls.append(("get_group", filename))
        return None

    def put_group(self, filename, group):
        self.calls.append(("put_group", filename))


@pytest.fixture
def triton_files(monkeypatch):
    """A stand-in for triton.runtime.cache (Triton itself is not installed here)."""
    import types

    mod = types.ModuleType("triton.runtime.cache")
    mod.FileCacheManager = FakeFileCacheManager
    for name, m in (("triton", types.ModuleType("triton")),
                    ("triton.runtime", types.ModuleType("triton.runtime")),
                    ("triton.runtime.cache", mod)):
        monkeypatch.setitem(sys.modules, name, m)
    FakeFileCacheManager.calls = []
    return FakeFileCacheManager.calls


@pytest.mark.parametrize("how", ["kcache.conf", "KCACHE_DISABLE", "unreadable kcache.conf",
                                 "unreadable setting"])
def test_disable_hands_triton_its_own_file_cache(monkeypatch, tt, cache_dir, triton_files,
                                                 caplog, how):
    """Off, kcache is out of Triton's way: every call goes to Triton's own file cache, as if
    TRITON_CACHE_MANAGER were not set, and the database is not even opened."""
    if how == "kcache.conf":
        (cache_dir / "kcache.conf").write_text("# off while we look into something\ndisable = true\n")
    elif how == "KCACHE_DISABLE":
        (cache_dir / "kcache.conf").write_text("disable = false\n")
        monkeypatch.setenv("KCACHE_DISABLE", "1")  # the environment wins over the file
    elif how == "unreadable kcache.conf":
        (cache_dir / "kcache.conf").write_text("disable true\n")
    else:
        monkeypatch.setenv("KCACHE_REMOTE", "ftp://not-a-remote")
    kt._reset()
    m = kt.CacheManager(KEY)
    assert m.get_group("add_kernel.json") is None
    assert m.put(b"cubin", "add_kernel.cubin") == "/triton/own/add_kernel.cubin"
    m.put_group("add_kernel.json", {"add_kernel.cubin": "/triton/own/add_kernel.cubin"})
    assert m.get_file("add_kernel.cubin") == "/triton/own/add_kernel.cubin"
    assert [c[0] for c in triton_files] == ["init", "get_group", "put", "put_group", "get_file"]
    assert not (cache_dir / "kcache.db").exists()
    warnings = [r.getMessage() for r in caplog.records if r.name == "kcache.triton"]
    if how.startswith("unreadable"):
        assert len(warnings) == 1 and "Triton's own file cache serves" in warnings[0], warnings
        assert ("kcache.conf:1" if how == "unreadable kcache.conf" else "KCACHE_REMOTE") \
            in warnings[0]
    else:
        assert warnings == []


def test_disable_off_in_the_environment_wins_over_the_file(monkeypatch, tt, cache_dir):
    (cache_dir / "kcache.conf").write_text("disable = true\n")
    monkeypatch.setenv("KCACHE_DISABLE", "0")
    kt._reset()
    compile_like_triton(kt.CacheManager(KEY))
    assert kt.CacheManager(KEY).get_group("add_kernel.json") is not None


def test_settings_are_read_once_per_process(monkeypatch, tt, cache_dir):
    """A process reads kcache's settings once (not on each of Triton's calls): a change of
    kcache.conf takes effect in the next process, as for the store's cap and codec."""
    calls = []
    real = kt._kcache.settings

    def counted(*a):
        calls.append(a)
        return real(*a)

    monkeypatch.setattr(kt._kcache, "settings", counted)
    for _ in range(3):
        m = kt.CacheManager(KEY)
        if m.get_group("add_kernel.json") is None:
            compile_like_triton(m)
    assert len(calls) == 1


def test_a_file_name_that_is_a_path_is_refused(tt):
    with pytest.raises(ValueError):
        kt.CacheManager(KEY).put(b"x", "../x.cubin")


def test_threads_compiling_one_kernel_see_whole_groups(tt):
    """Inductor compiles from threads: eight at once put and read one kernel's group."""
    import threading

    errors = []

    def work(i):
        try:
            for _ in range(20):
                m = kt.CacheManager(KEY)
                got = m.get_group("add_kernel.json")
                if got is None:
                    compile_like_triton(m)
                    continue
                assert sorted(got) == ["add_kernel.cubin", "add_kernel.json", "add_kernel.ptx",
                                       "add_kernel.source", "add_kernel.ttir"]
                with open(got["add_kernel.json"]) as f:
                    assert f.read() == '{"name": "add_kernel"}'
                with open(got["add_kernel.cubin"], "rb") as f:
                    assert f.read() == b"\x7fELF" + bytes(range(256)) * 40
        except Exception as ex:  # reported by the main thread
            errors.append(ex)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    s = kt.stats()
    assert s["errors"] == 0 and s["damaged"] == 0 and s["groups_hit"] > 0
    assert [n for n in os.listdir(os.path.join(kt.staging_dir(), KEY)) if n.startswith(".")] == []


HOLDER = textwrap.dedent("""
    import os, sys, time
    import kcache.triton as kt
    m = kt.CacheManager(sys.argv[1])
    assert m.get_group("add_kernel.json") is None
    print("claimed", flush=True)
    if sys.argv[2] == "crash":
        os._exit(3)
    time.sleep(float(sys.argv[3]))
    group = {"add_kernel.cubin": m.put(b"cubin from the holder", "add_kernel.cubin"),
             "add_kernel.json": m.put("{}", "add_kernel.json")}
    m.put_group("add_kernel.json", group)
    print("stored", flush=True)
""")


def start_holder(tt, cache_dir, how, hold_s=1.0):
    env = dict(os.environ, KCACHE_DIR=str(cache_dir), KCACHE_TRITON_STAGING=str(tt))
    p = subprocess.Popen([sys.executable, "-c", HOLDER, KEY, how, str(hold_s)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "claimed", p.stderr.read()
    return p


def test_a_second_process_waits_for_the_compile_of_the_first(tt, cache_dir):
    import time

    holder = start_holder(tt, cache_dir, "store", 1.0)
    t0 = time.monotonic()
    got = kt.CacheManager(KEY).get_group("add_kernel.json")
    waited = time.monotonic() - t0
    assert holder.wait(30) == 0
    assert got is not None, "compiled again instead of waiting for the other process's group"
    assert open(got["add_kernel.cubin"], "rb").read() == b"cubin from the holder"
    assert waited >= 0.5 and kt.stats()["waited"] == 1
    # The polls while waiting are not misses of the namespace: the holder's and ours are.
    kt._get_store().flush()
    assert kcache.Cache(cache_dir).stats("triton")["misses"] == 2


def test_a_claim_ends_with_its_process(tt, cache_dir):
    import time

    holder = start_holder(tt, cache_dir, "crash")
    assert holder.wait(30) == 3
    t0 = time.monotonic()
    assert kt.CacheManager(KEY).get_group("add_kernel.json") is None
    assert time.monotonic() - t0 < 1.0 and kt.stats()["waits_timed_out"] == 0


def test_a_wait_is_bounded(monkeypatch, tt, cache_dir):
    import time

    monkeypatch.setenv("KCACHE_TRITON_WAIT", "0.3")
    holder = start_holder(tt, cache_dir, "store", 20.0)
    try:
        t0 = time.monotonic()
        assert kt.CacheManager(KEY).get_group("add_kernel.json") is None
        assert 0.25 <= time.monotonic() - t0 < 5.0
        assert kt.stats()["waits_timed_out"] == 1
    finally:
        holder.kill()
        holder.wait(30)


def test_a_remote_that_cannot_be_used_leaves_the_local_cache(monkeypatch, tt, cache_dir, caplog):
    # A remote the settings accept that cannot be opened (one they refuse: a test above).
    monkeypatch.setenv("KCACHE_REMOTE", "redis://user:pass:word@")
    kt._reset()
    compile_like_triton(kt.CacheManager(KEY))
    assert kt.CacheManager(KEY).get_group("add_kernel.json") is not None
    warnings = [r.getMessage() for r in caplog.records if r.name == "kcache.triton"]
    assert len(warnings) == 1 and "cannot use the remote" in warnings[0], warnings
    monkeypatch.delenv("KCACHE_REMOTE")
    assert kcache.Cache(cache_dir).stats("triton")["entries"] == 1


def test_settings_resolve_as_the_command_does(monkeypatch, cache_dir):
    """kcache.triton reads disable (and the store its cap, codec and remote) from the
    settings the command line shows: environment over kcache.conf over the default."""
    from kcache import _kcache

    db = str(cache_dir / "kcache.db")
    (cache_dir / "kcache.conf").write_text("disable = true\nmax_size = 1G\n")
    s = _kcache.settings(db)
    assert s["path"] == db and s["disable"] == "true" and s["max_size"] == "1G"
    monkeypatch.setenv("KCACHE_DISABLE", "0")
    assert _kcache.settings(db)["disable"] == "0"
    monkeypatch.setenv("KCACHE_DIR", str(cache_dir))
    assert _kcache.settings()["path"] == db
    (cache_dir / "kcache.conf").write_text("disable true\n")
    with pytest.raises(kcache.Error, match="kcache.conf:1"):
        _kcache.settings(db)


WRITER = textwrap.dedent("""
    import os, sys
    import kcache.triton as kt
    m = kt.CacheManager(sys.argv[1])
    had = m.get_group("add_kernel.json")  # a hit when Triton compiles again (always_compile)
    assert (had is not None) == (sys.argv[2] == "again"), had
    group = {}
    for ext, data in (("ttir", b"module {}"), ("ptx", b".version 8.7"), ("cubin", b"new cubin")):
        group["add_kernel." + ext] = m.put(data, "add_kernel." + ext)
    print("between", flush=True)
    if sys.stdin.readline().strip() == "die":
        os._exit(9)  # killed in the middle of its compile
    group["add_kernel.json"] = m.put('{"v": "new"}', "add_kernel.json")
    m.put_group("add_kernel.json", group)
    print("stored", flush=True)
""")
NAMES = ["add_kernel.cubin", "add_kernel.json", "add_kernel.ptx", "add_kernel.ttir"]


def visible(cache_dir):
    """What another process can see of KEY's kernel: the group entry's members, and each
    file as get_file hands it out (neither waits for the writer's claim)."""
    with kcache.Cache(cache_dir) as c:
        blob = c.get("triton", KEY.encode() + b"\0__grp__add_kernel.json")
    group = kt._decode_group(blob) if blob is not None else None
    files = {}
    for name in NAMES:
        p = kt.CacheManager(KEY).get_file(name)
        if p is not None:
            with open(p, "rb") as f:
                files[name] = f.read()
    return ({n: bytes(v) for n, v in group.items()} if group is not None else None), files


def start_writer(tt, cache_dir, how):
    env = dict(os.environ, KCACHE_DIR=str(cache_dir), KCACHE_TRITON_STAGING=str(tt))
    p = subprocess.Popen([sys.executable, "-c", WRITER, KEY, how], env=env, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "between", p.stderr.read()
    return p


@pytest.mark.parametrize("how", ["first", "again"])
def test_another_process_sees_a_group_whole_or_not_at_all(tt, cache_dir, how):
    """While a process compiles a kernel, another sees none of its files, or (Triton compiling
    a kernel again) the group stored before, every file as in that group; once stored, the
    new group whole. Never a member without its group, never one of another compile."""
    if how == "again":
        m = kt.CacheManager(KEY)
        assert m.get_group("add_kernel.json") is None
        m.put_group("add_kernel.json", {"add_kernel.cubin": m.put(b"old cubin", "add_kernel.cubin"),
                                        "add_kernel.json": m.put('{"v": "old"}', "add_kernel.json")})
        old = {"add_kernel.cubin": b"old cubin", "add_kernel.json": b'{"v": "old"}'}
    w = start_writer(tt, cache_dir, how)
    try:
        group, files = visible(cache_dir)
        if how == "first":
            assert group is None and files == {}, "a compile's files seen before its group"
        else:
            assert group == old and files == old, "files of a compile not yet stored"
        w.stdin.write("go\n")
        w.stdin.flush()
        assert w.stdout.readline().strip() == "stored", w.stderr.read()
    finally:
        w.stdin.close()
        assert w.wait(30) == 0, w.stderr.read()
    group, files = visible(cache_dir)
    assert sorted(group) == NAMES and group["add_kernel.cubin"] == b"new cubin"
    assert files == group
    assert kcache.Cache(cache_dir).stats("triton")["entries"] == 1


def test_a_compile_killed_before_its_group_leaves_nothing(tt, cache_dir):
    w = start_writer(tt, cache_dir, "first")
    w.stdin.write("die\n")
    w.stdin.close()
    assert w.wait(30) == 9
    assert visible(cache_dir) == (None, {})
    assert kcache.Cache(cache_dir).stats("triton")["entries"] == 0


def test_without_staging_the_compile_goes_on_in_tritons_directory(monkeypatch, tt, cache_dir,
                                                                  triton_files, caplog):
    """No memory file system to stage in (none usable, or full): Triton is handed paths in
    its own cache directory, as without kcache, and the kernel is stored in kcache all the
    same; reported once. The cache never makes a compile fail."""
    blocker = cache_dir / "not a directory"
    blocker.write_text("x")
    bases = kt._staging_bases
    monkeypatch.setattr(kt, "_staging_bases", lambda: [str(blocker)])
    kt._reset()
    m = kt.CacheManager(KEY)
    group = compile_like_triton(m)
    assert group is not None
    assert all(p == "/triton/own/" + n for n, p in group.items()), group
    hit = kt.CacheManager(KEY).get_group("add_kernel.json")
    assert hit == {n: "/triton/own/" + n for n in group}
    assert kcache.Cache(cache_dir).stats("triton")["entries"] == 1
    warnings = [r.getMessage() for r in caplog.records if r.name == "kcache.triton"]
    assert len(warnings) == 1 and "Triton's cache directory" in warnings[0], warnings
    # Staging back: the same entry is served from it, whole.
    monkeypatch.setattr(kt, "_staging_bases", bases)
    kt._reset()
    got = kt.CacheManager(KEY).get_group("add_kernel.json")
    assert open(got["add_kernel.cubin"], "rb").read() == b"\x7fELF" + bytes(range(256)) * 40

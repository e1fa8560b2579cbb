"""kcache.triton.CacheManager with the real Triton: kernels compiled for sm_80/sm_90 (no GPU
needed) in child processes, served from kcache in the next ones."""
import json
import os
import shutil
import subprocess
import sys

import pytest

import kcache
from conftest import wait_until

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pyhelp"))
from kctest import redis_on_loopback  # noqa: E402

BLOCKS = "16,32,64"


def groups(env):
    """The triton namespace's entries (one per kernel)."""
    with kcache.Cache(env.cache) as c:
        return c.stats("triton")["entries"]


def reference(env, blocks=BLOCKS, arch=90):
    """What Triton gives with its own file cache (no kcache), in a directory of its own."""
    own = env.root / "triton's own"
    own.mkdir(exist_ok=True)
    r, _ = env.compile("--arch", arch, "--blocks", blocks,
                       env={"TRITON_CACHE_MANAGER": None, "TRITON_CACHE_DIR": str(own)})
    return {k["id"]: k["cubin_sha256"] for k in r["kernels"]}


def test_next_process_is_served_from_kcache(env):
    ref = reference(env)
    first, _ = env.compile("--blocks", BLOCKS)
    assert [k["hit"] for k in first["kernels"]] == [False] * 3
    assert first["kcache"]["groups_put"] == 3 and first["kcache"]["errors"] == 0
    second, _ = env.compile("--blocks", BLOCKS)
    assert [k["hit"] for k in second["kernels"]] == [True] * 3
    assert second["kcache"]["groups_hit"] == 3 and second["kcache"]["puts"] == 0
    for a, b in zip(first["kernels"], second["kernels"]):
        assert a["hash"] == b["hash"] and a["cubin_sha256"] == b["cubin_sha256"]
        assert b["cubin_sha256"] == ref[b["id"]], "not Triton's own bytes"
        # Every stage Triton keeps comes back, not only the CUBIN.
        assert b["asm"] == ["cubin", "llir", "ptx", "source", "ttgir", "ttir"]
        assert a["group"] == b["group"]
    # Triton's own directory stays empty, and nothing is left staged once the processes are gone.
    assert env.triton_files() == []
    assert os.listdir(env.triton_dir) == []
    assert env.staged() == []
    # One row per kernel: the group; its members are never stored on their own.
    files = sorted(os.listdir(env.cache))
    assert [f for f in files if not f.startswith("kcache.db")] == [], files
    assert "triton" in env.kcache("ls", "--namespace", "triton")
    n = groups(env)
    assert n == 3


def test_two_architectures_never_share(env):
    r80, _ = env.compile("--arch", 80, "--blocks", "64")
    r90, _ = env.compile("--arch", 90, "--blocks", "64")
    k80, k90 = r80["kernels"][0], r90["kernels"][0]
    assert not k80["hit"] and not k90["hit"], "sm_90 was served sm_80's kernel"
    assert k80["hash"] != k90["hash"] and k80["cubin_sha256"] != k90["cubin_sha256"]
    again80, _ = env.compile("--arch", 80, "--blocks", "64")
    again90, _ = env.compile("--arch", 90, "--blocks", "64")
    assert again80["kernels"][0]["hit"] and again90["kernels"][0]["hit"]
    assert again80["kernels"][0]["arch"] == 80 and again90["kernels"][0]["arch"] == 90
    assert again80["kernels"][0]["cubin_sha256"] == k80["cubin_sha256"]
    assert again90["kernels"][0]["cubin_sha256"] == k90["cubin_sha256"]


def test_cap_holds_with_groups(env):
    cap = 256 * 1024
    (env.cache / "kcache.conf").write_text("max_size = %d\n" % cap)
    blocks = ",".join(str(16 << i) for i in range(8))
    first, _ = env.compile("--blocks", blocks, "--warps", "1,2,4")
    assert first["kcache"]["errors"] == 0
    # The cap covers the database and its WAL (<kcache/store.h>); beside them are SQLite's
    # shared-memory index (32 KiB) and the lock files, whatever the cap.
    size = sum(os.path.getsize(env.cache / f) for f in ("kcache.db", "kcache.db-wal")
               if (env.cache / f).exists())
    assert size <= cap, "the cache is %d bytes over a cap of %d" % (size, cap)
    n = groups(env)
    assert 0 < n < 24, "the cap evicted nothing (or everything): %d groups" % n
    # What the cap left is whole: the most recently compiled kernels are hits of the same bytes.
    last = first["kernels"][-min(n, 3):]
    warps = sorted({k["id"].split("w")[1] for k in last})
    second, _ = env.compile("--blocks", ",".join(sorted({k["id"].split("w")[0] for k in last})),
                            "--warps", ",".join(warps))
    ref = {k["id"]: k["cubin_sha256"] for k in first["kernels"]}
    got = {k["id"]: k for k in second["kernels"]}
    for k in last:
        assert got[k["id"]]["hit"], "%s was evicted though it was used last" % k["id"]
    for k in second["kernels"]:
        assert k["cubin_sha256"] == ref[k["id"]]
    assert second["kcache"]["damaged"] == 0 and second["kcache"]["errors"] == 0
    assert env.triton_files() == []


def test_eight_processes_at_once_on_an_empty_cache(env):
    blocks = "16,32,64,128"
    ref = reference(env, blocks)
    t = wait_until(3.0)
    procs = [env.popen("--blocks", blocks, "--wait-until", t) for _ in range(8)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
        results.append(json.loads(out))
    for r in results:
        assert r["kcache"]["errors"] == 0 and r["kcache"]["damaged"] == 0
        assert r["kcache"]["waits_timed_out"] == 0
        for k in r["kernels"]:
            assert k["cubin_sha256"] == ref[k["id"]]
    # Each kernel was compiled by one process; the seven others waited for its group.
    compiles = {i: sum(1 for r in results for k in r["kernels"] if k["id"] == i and not k["hit"])
                for i in ref}
    assert compiles == {i: 1 for i in ref}, compiles
    # Afterwards one process is served every kernel whole.
    after, _ = env.compile("--blocks", blocks)
    assert all(k["hit"] for k in after["kernels"])
    assert all(k["cubin_sha256"] == ref[k["id"]] for k in after["kernels"])
    assert env.triton_files() == [] and env.staged() == []


def test_damaged_group_is_a_miss_and_is_replaced(env):
    first, _ = env.compile("--blocks", "64")
    n = groups(env)
    assert n == 1
    # Replace the group with one that lacks its metadata member, through the public API.
    import kcache.triton as kt

    c = kcache.Cache(env.cache)
    key = first["kernels"][0]["paths"][0].split(os.sep)[-2]
    ck = key.encode() + b"\0" + b"__grp__add_kernel.json"
    blob = c.get("triton", ck)
    assert blob is not None
    members = kt._decode_group(blob)
    assert members is not None and "add_kernel.json" in members
    del members["add_kernel.json"]
    c.put("triton", ck, kt._encode_group(members))
    c.close()
    second, _ = env.compile("--blocks", "64")
    assert not second["kernels"][0]["hit"], "a group without its metadata was served"
    assert second["kcache"]["damaged"] == 1 and second["kcache"]["groups_put"] == 1
    assert second["kernels"][0]["cubin_sha256"] == first["kernels"][0]["cubin_sha256"]
    third, _ = env.compile("--blocks", "64")
    assert third["kernels"][0]["hit"]


def test_stale_staging_of_a_dead_process_is_removed(env):
    uid = os.getuid()
    dead = env.stage / ("kcache-triton-%d-999999999-12345-abc" % uid)
    (dead / "KEY").mkdir(parents=True)
    (dead / "KEY" / "add_kernel.cubin").write_bytes(b"x")
    alive = env.stage / ("kcache-triton-%d-%d-%s-abc" % (uid, os.getpid(), _start_time()))
    alive.mkdir()
    other = env.stage / "kcache-triton-notours"
    other.mkdir()
    env.compile("--blocks", "64")
    assert env.staged() == sorted([alive.name, other.name])


def _start_time():
    import kcache.triton as kt

    return kt._start_time(os.getpid())


def test_cache_that_cannot_be_opened_never_fails_the_compile(env):
    blocker = env.root / "a file"
    blocker.write_text("not a directory")
    r, err = env.compile("--blocks", "64", env={"KCACHE_DIR": str(blocker / "sub")})
    assert not r["kernels"][0]["hit"] and r["kcache"]["errors"] >= 1
    assert err.count("cannot open the cache") == 1, err
    assert env.triton_files() == []


@pytest.mark.parametrize("how", ["kcache.conf", "KCACHE_DISABLE"])
def test_disable_hands_triton_its_own_cache(env, how):
    """Off, kcache steps out of the way: Triton's own file cache serves, as without
    TRITON_CACHE_MANAGER, and kcache's database is not even made."""
    off = {}
    if how == "kcache.conf":
        (env.cache / "kcache.conf").write_text("disable = true\n")
    else:
        off = {"KCACHE_DISABLE": "1"}
    first, _ = env.compile("--blocks", "64", env=off)
    again, _ = env.compile("--blocks", "64", env=off)
    assert not first["kernels"][0]["hit"] and again["kernels"][0]["hit"]
    assert first["kcache"]["groups_put"] == 0 and again["kcache"]["groups_hit"] == 0
    own = env.triton_files()
    assert any(f.endswith("add_kernel.cubin") for f in own), own
    assert all(p.startswith(str(env.triton_dir)) for p in again["kernels"][0]["paths"])
    assert not (env.cache / "kcache.db").exists()
    # On again, kcache serves (its own compile once) and Triton's directory gets nothing more.
    if how == "kcache.conf":
        (env.cache / "kcache.conf").write_text("disable = false\n")
    on, _ = env.compile("--blocks", "64")
    on2, _ = env.compile("--blocks", "64")
    assert not on["kernels"][0]["hit"] and on2["kernels"][0]["hit"]
    assert on2["kernels"][0]["cubin_sha256"] == first["kernels"][0]["cubin_sha256"]
    assert env.triton_files() == own


def test_hits_are_counted_in_the_file(env):
    env.compile("--blocks", "16,32")
    env.compile("--blocks", "16,32")
    with kcache.Cache(env.cache) as c:
        s = c.stats("triton")
    assert s["entries"] == 2 and s["hits"] == 2, s


def test_groups_travel_through_the_remote(env, tmp_path):
    """A fleet shares Triton's kernels through kcache's remote: a compile on one machine is
    pushed as it is stored, and another machine's miss is served from the remote; a cache
    without the remote set gets them with `kcache remote pull`."""
    with redis_on_loopback(tmp_path) as server:
        if not server:
            pytest.skip("redis-server is not installed")
        url, port = server
        first, _ = env.compile("--blocks", "16,32", env={"KCACHE_REMOTE": url})
        assert [k["hit"] for k in first["kernels"]] == [False, False]
        # The remote holds what the local cache holds: a kernel as one entry (its group),
        # none of its members on their own (the launcher modules are entries of their own).
        cli = shutil.which("redis-cli")
        if cli:
            keys = subprocess.run([cli, "-p", str(port), "--scan", "--pattern", "kcache:entry:*"],
                                  capture_output=True, text=True, timeout=30).stdout.split()
            assert len(keys) == groups(env), (keys, groups(env))
        want = [k["cubin_sha256"] for k in first["kernels"]]
        other = tmp_path / "other machine"
        other.mkdir()
        second, _ = env.compile("--blocks", "16,32",
                                env={"KCACHE_REMOTE": url, "KCACHE_DIR": str(other)})
        assert [k["hit"] for k in second["kernels"]] == [True, True], "not served by the remote"
        assert [k["cubin_sha256"] for k in second["kernels"]] == want
        third = tmp_path / "third machine"
        third.mkdir()
        env.vars["KCACHE_DIR"] = str(third)
        env.kcache("remote", "pull", "--arch", "triton", "--remote", url)
        pulled, _ = env.compile("--blocks", "16,32")
        assert [k["hit"] for k in pulled["kernels"]] == [True, True]
        assert [k["cubin_sha256"] for k in pulled["kernels"]] == want

#!/usr/bin/env python3
"""What a new user and a ccache user trip over, row by row, end to end.

Usage: test_ux.py KCACHE KCACHE_FILL SOURCE_ROOT [TEST-NAME...]

Each test is one row of the table of what went wrong (counts that add up,
sizes that mean what they say, messages that name the mistake, exit
statuses, completion, help, the man page) or one of ccache's habits (-s, -z,
-C, -p, -M, -o, -V, -x, -X, --evict-older-than, --checksum-file). Tests that
compile need NVRTC (CUDA toolkit); without it they say so and pass the rest.
"""
import hashlib
import os
import pty
import re
import select
import shutil
import sqlite3
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
SOURCE_ROOT = os.path.abspath(sys.argv.pop(3)) if len(sys.argv) > 3 else None
import test_cli as base  # noqa: E402  (the same harness, same arguments)
from kctest import Cache, check  # noqa: E402  (on the path test_cli set)

GiB = 1 << 30
SAXPY = os.path.join(SOURCE_ROOT, "examples", "saxpy.cu")
BROKEN = os.path.join(SOURCE_ROOT, "examples", "broken.cu")
_can_compile = None


def can_compile(c):
    """Whether kcache compiles here (a CUDA toolkit with NVRTC)."""
    global _can_compile
    if _can_compile is None:
        p = subprocess.run([base.KCACHE, "compile", SAXPY, "--arch", "sm_90", "--no-cache"],
                           env=c.env, capture_output=True)
        _can_compile = p.returncode == 0
        if not _can_compile:
            print("note: no NVRTC here: the compile rows are not checked")
    return _can_compile


def on_terminal(c, *args):
    """Runs kcache with stdout on a pseudo-terminal; returns (exit status, output)."""
    pid, fd = pty.fork()
    if pid == 0:
        os.execve(base.KCACHE, [base.KCACHE] + list(args), c.env)
    out = b""
    while True:
        r, _, _ = select.select([fd], [], [], 30)
        if not r:
            break
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), out.decode("utf-8", "replace")


# ---- the rows --------------------------------------------------------------


def test_config_bare_number_is_gib(root):
    c = Cache(root)
    c.run("config", "max_size", "5")
    check(c.run("config", "max_size")[0].strip() == "5.00 GiB", "a bare number is GiB")
    c.run("config", "max_size", "0")
    check(c.run("config", "max_size")[0].strip() == "none", "0 is no cap")


def test_config_key_equals_value_hint(root):
    c = Cache(root)
    _, err = c.run("config", "max_size=8G", rc=2)
    check("kcache config max_size 8G" in err, "the hint names the form: %r" % err)


def test_config_unset_twice(root):
    c = Cache(root)
    c.run("config", "compression", "lz4")
    out, _ = c.run("config", "--unset", "compression")
    check(out.startswith("Removed compression"), out)
    out, _ = c.run("config", "--unset", "compression")
    check("was not set" in out and "Removed" not in out, "the second unset: %r" % out)


def test_usage_errors_exit_2(root):
    c = Cache(root)
    _, err = c.run("config", "compression", "bogus", rc=2)
    check("zstd" in err, err)
    c.run("config", "busy_timeout", "-3", rc=2)
    c.run("config", "nosuchkey", rc=2)
    if can_compile(c):
        _, err = c.run("compile", SAXPY, "--arch", "sm_90", "--", "-arch=sm_80", rc=2)
        check("--arch" in err, "says to give it with --arch: %r" % err)


def test_run_not_found_127_not_executable_126(root):
    c = Cache(root)
    env = {"ASAN_OPTIONS": "verify_asan_link_order=0"}
    _, err = c.run("run", "kcache-no-such-program", rc=127, env=env)
    check("kcache-no-such-program" in err, err)
    plain = os.path.join(root, "plain.txt")
    with open(plain, "w") as f:
        f.write("not a program\n")
    os.chmod(plain, 0o644)
    if os.geteuid() != 0:  # root may run anything with an x bit; this one has none
        c.run("run", plain, rc=126, env=env)
    c.run("run", "-v", "kcache-no-such-program", rc=127, env=env)


def test_compile_names_the_nvrtc_flag(root):
    c = Cache(root)
    for flag in ("-std=c++14", "-lineinfo", "--use_fast_math"):
        _, err = c.run("compile", SAXPY, flag, "--arch", "sm_90", rc=2)
        check(flag in err and "--" in err and "after" in err,
              "%s is named and told to go after --: %r" % (flag, err))
        check(SAXPY not in err, "the file is not blamed: %r" % err)


def test_compile_nvcc_arch_spelling(root):
    c = Cache(root)
    if not can_compile(c):
        return
    for args in (("-arch=sm_90",), ("-arch", "sm_90")):
        out, err = c.run("compile", SAXPY, *args)
        check("sm_90" in out, "%s accepted: %r %r" % (args, out, err))


def test_compile_output_one_rule(root):
    c = Cache(root)
    one = os.path.join(root, "single.cubin")
    _, err = c.run("compile", SAXPY, "--arch", "sm_90,sm_80", "-o", one, rc=2)
    check(not os.path.exists(one), "no directory named single.cubin")
    check("directory" in err, err)
    # --arch given twice is two architectures, as sm_90,sm_80 is: never the last alone.
    _, err = c.run("compile", SAXPY, "--arch", "sm_90", "--arch", "sm_80", "-o", one, rc=2)
    check(not os.path.exists(one) and "2 items" in err, "--arch twice: %r" % err)
    _, err = c.run("compile", SAXPY, "-arch=sm_90", "-arch=sm_80", "-o", one, rc=2)
    check(not os.path.exists(one) and "2 items" in err, "-arch= twice: %r" % err)
    newdir = os.path.join(root, "newdir")
    nodir = os.path.join(root, "nodir") + "/"
    if can_compile(c):
        c.run("compile", SAXPY, "--arch", "sm_90,sm_80", "-o", newdir + "/")
        check(os.path.isdir(newdir) and len(os.listdir(newdir)) == 2, "newdir/ made and filled")
        c.run("compile", SAXPY, "--arch", "sm_90", "-o", nodir)
        check(os.path.isfile(os.path.join(nodir, "saxpy.sm_90.cubin")),
              "nodir/ made, the file in it: %s" % os.listdir(root))
        plain = os.path.join(root, "k.cubin")
        c.run("compile", SAXPY, "--arch", "sm_90", "-o", plain)
        check(os.path.isfile(plain), "one item, no slash: a file")


def test_compile_a_directory(root):
    c = Cache(root)
    _, err = c.run("compile", root, "--arch", "sm_90", rc=2)
    check("is a directory" in err, err)


def test_compile_error_said_once(root):
    c = Cache(root)
    if not can_compile(c):
        return
    out, err = c.run("compile", SAXPY, "--arch", "sm_90", "--", "--bogus-flag", rc=1)
    n = (out + err).count("--bogus-flag")
    check(n == 1, "the message once, not %d times: %r %r" % (n, out, err))


def test_import_twice(root):
    src = Cache(root, "src")
    src.fill(19)
    bundle = os.path.join(root, "b.kcache")
    src.run("export", bundle)
    dst = Cache(root, "dst")
    dst.run("import", bundle)
    out, _ = dst.run("import", bundle)
    check(out.startswith("Nothing to import: all 19 entries are already here"),
          "the second import: %r" % out)


def test_get_ptx_on_a_terminal(root):
    c = Cache(root)
    ptx = os.path.join(root, "k.ptx")
    with open(ptx, "w") as f:
        f.write("//\n.version 8.8\n.target sm_90\n.visible .entry k() { ret; }\n")
    key = c.fill(1, "--kind", "ptx", "--arch", "compute_90", "--data", ptx)[0]
    rc, out = on_terminal(c, "get", key[:12])
    check(rc == 0 and ".visible .entry k()" in out, "PTX printed: %d %r" % (rc, out))
    cub = c.fill(1, "--seed", 7)[0]
    rc, out = on_terminal(c, "get", cub[:12])
    check(rc == 2 and "binary" in out, "a CUBIN is still refused: %d %r" % (rc, out))


def test_disabled_run_says_so(root):
    c = Cache(root)
    _, err = c.run("run", "-v", "true", rc=None,
                   env={"KCACHE_DISABLE": "1", "ASAN_OPTIONS": "verify_asan_link_order=0"})
    lines = [l for l in err.splitlines() if "off" in l]
    check(len(lines) == 1 and "KCACHE_DISABLE" in lines[0], "one line: the cache is off: %r" % err)


def complete(line):
    """What the bash completion offers for line (the cursor at its end)."""
    script = os.path.join(SOURCE_ROOT, "completion", "kcache.bash")
    words = line.split(" ")
    prog = ('source "$1"; COMP_WORDS=(%s); COMP_CWORD=%d; _kcache; printf "%%s\\n" "${COMPREPLY[@]}"'
            % (" ".join("'%s'" % w for w in words), len(words) - 1))
    p = subprocess.run(["bash", "-c", prog, "bash", script], capture_output=True, timeout=30)
    return p.stdout.decode().split()


def options_of(help_text):
    """The options a --help lists: those opening an option line, and the usage line's."""
    found = set()
    for line in help_text.splitlines():
        if line.startswith("usage:"):
            found.update(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", line))
        m = re.match(r"^\s+(?:-\w, )?(--[a-z][a-z-]+)", line)
        if m:
            found.add(m.group(1))
    return sorted(found)


def test_completion(root):
    c = Cache(root)
    if not shutil.which("bash"):
        return
    offered = complete("kcache config max_size ")
    check("8G" in offered and "max_size" not in offered, "values, not names: %s" % offered)
    check("zstd" in complete("kcache config compression "), "compression's values")
    verbs = ["compile", "explain", "stats", "ls", "inspect", "get", "prune", "export", "import",
             "verify", "config", "remote", "clear", "vacuum", "path", "run", "recompress"]
    missing = []
    for verb in verbs:
        text, _ = c.run(verb, "--help")
        offered = complete("kcache %s --" % verb) + complete("kcache %s -" % verb)
        for opt in options_of(text):
            if opt not in offered:
                missing.append("%s %s" % (verb, opt))
    check(not missing, "completion lacks: %s" % ", ".join(missing))
    text, _ = c.run("--help")
    offered = complete("kcache --") + complete("kcache -")
    lacking = [o for o in options_of(text) if o not in offered]
    check(not lacking, "global options the completion lacks: %s" % lacking)


def test_help_names_kcache_json(root):
    c = Cache(root)
    for verb in ("stats", "ls", "inspect", "explain", "verify", "prune", "config"):
        out, _ = c.run(verb, "--help")
        check("kcache-json(7)" in out and "README" not in out, "%s --help: %r" % (verb, out))


def test_man_page_compression_default(root):
    with open(os.path.join(SOURCE_ROOT, "doc", "kcache.1")) as f:
        page = f.read()
    env = page[page.index(".B KCACHE_COMPRESSION"):][:300]
    c = Cache(root)
    c.fill(1)
    default = c.run("config", "compression")[0].strip()
    check(default in ("zstd", "lz4", "none"), "the code's default: %r" % default)
    check(("\\fB%s\\fR (the default)" % default) in env and env.count("(the default)") == 1,
          "KCACHE_COMPRESSION names %s, the code's default, as the default: %r" % (default, env))


def test_damaged_database_says_what_to_do(root):
    c = Cache(root)
    os.makedirs(c.dir)
    with open(c.db, "wb") as f:
        f.write(b"this is not a database " * 300)
    _, err = c.run("stats", rc=1)
    check("damaged" in err and "kcache clear" in err and len(err.strip().splitlines()) == 1,
          "one line with what to do: %r" % err)
    _, err = c.run("ls", rc=1)
    check("kcache clear" in err, err)


def test_prune_dry_run_predicts(root):
    c = Cache(root)
    c.fill(60, "--size", 8192)
    before_all = c.snapshot()
    # A WAL, as a process that wrote leaves it (kcache keeps up to 256 KiB
    # of it at close): a real prune hands it back before it evicts anything,
    # so the dry run must count on that too.
    con = sqlite3.connect(c.db)
    try:
        con.execute("PRAGMA wal_autocheckpoint = 0")
        # Written twice, back as it was: the pages are in the WAL, the bytes unchanged.
        con.execute("UPDATE artifact SET data = data || x'00' WHERE id <= 12")
        con.commit()
        con.execute("UPDATE artifact SET data = substr(data, 1, length(data) - 1) WHERE id <= 12")
        con.commit()
        st = c.json("stats")
        check(st["wal_bytes"] > 64 << 10, "a WAL to hand back: %s" % st)
        for target in ("%dK" % ((st["file_bytes"] >> 10) + 40), "300K", "200K"):
            dry = c.json("prune", "--max-size", target, "--dry-run")
            real = c.json("prune", "--max-size", target)
            check(dry["evicted"] == real["evicted"],
                  "--max-size %s: the dry run said %d, the run evicted %d"
                  % (target, dry["evicted"], real["evicted"]))
            check(abs(dry["disk_after"] - real["disk_after"]) <= 4096,
                  "--max-size %s: size after %d predicted, %d real"
                  % (target, dry["disk_after"], real["disk_after"]))
        left = c.snapshot()
        changed = [k for k, v in left.items() if before_all.get(k) != v]
        check(left and not changed, "what is left is served as it was: %d left, changed %s"
              % (len(left), [(before_all.get(k, (None,))[0], left[k][0]) for k in changed[:2]]))
    finally:
        con.close()


def test_stats_errors_are_nvrtc_failures(root):
    c = Cache(root)
    if not can_compile(c):
        return
    c.run("compile", os.path.join(root, "missing.cu"), "--arch", "sm_90", rc=1)
    st = c.json("stats")
    check(st["errors"] == 0, "a missing file is not a failed compile: %s" % st)
    check(st.get("request_errors") == 1, "it is counted apart: %s" % st)
    out, _ = c.run("compile", SAXPY, "--arch", "native", rc=None)
    if out.startswith("error"):  # no GPU here: --arch native cannot be resolved
        c.run("compile", os.path.join(root, "missing.cu"), "--arch", "sm_90", rc=1)
        st = c.json("stats")
        check(st["errors"] == 0 and st["request_errors"] == 3,
              "--arch native without a GPU is a bad request too: %s" % st)
        c.run("stats", "-z")
        c.run("compile", os.path.join(root, "missing.cu"), "--arch", "sm_90", rc=1)
    c.run("compile", BROKEN, "--arch", "sm_90", rc=1)
    st = c.json("stats")
    check(st["errors"] == 1 and st["request_errors"] == 1, "NVRTC's failure counted: %s" % st)
    out, _ = c.run("stats")
    check(re.search(r"^Errors:\s+1\s", out, re.M) and re.search(r"^Bad requests:\s+1\b", out, re.M),
          out)


def test_stage_sh_stages_the_drop_in(root):
    with open(os.path.join(SOURCE_ROOT, "benchmarks", "gpu", "stage.sh")) as f:
        text = f.read()
    with open(os.path.join(SOURCE_ROOT, "benchmarks", "gpu", "dropin", "dropin.py")) as f:
        dropin = f.read()
    check("libnvrtc" in text and "nvrtc-shim" in text, "stage.sh copies the drop-in")
    check("dropin" in text, "stage.sh copies dropin.py's files")
    check(dropin, "dropin.py is there")


def dropin_runs(c, *args, n=2):
    """Runs nvrtc-user under 'kcache run -v' n times; returns each process's report line."""
    user = os.environ.get("NVRTC_USER")
    if not user or not can_compile(c):
        print("note: no nvrtc-user or no NVRTC: the drop-in rows are not checked")
        return None
    env = {"ASAN_OPTIONS": "detect_leaks=0:verify_asan_link_order=0"}
    reports = []
    c.outputs = []
    for _ in range(n):
        out, err = c.run("run", "-v", user, SAXPY, "sm_90", *args, env=env)
        check(out.startswith("0 "), "the program compiled: %r %r" % (out, err))
        c.outputs.append(out)
        reports += [l for l in err.splitlines() if l.startswith("kcache: nvrtc pid")]
    return reports


def test_dropin_one_lookup_per_compile(root):
    c = Cache(root)
    reports = dropin_runs(c)
    if reports is None:
        return
    st = c.json("stats")
    check(st["misses"] == 1 and st["hits"] == 1,
          "one lookup per compile request (a miss, then a hit): %s %s" % (st, reports))
    # data: the drop-in's record of what its NVRTC says of itself (lib/nvrtc-shim/facts.c).
    # The program asks for its CUBIN only: no PTX is stored beside it (the drop-in keeps
    # an sm_XX miss's PTX only when the program asks for it, tests/nvrtc-shim/test_sound.py).
    check(st["entries_by_kind"] == {"cubin": 1, "ptx": 0, "ltoir": 0, "data": 1},
          "the CUBIN, and the kinds shown apart: %s" % st["entries_by_kind"])
    check(sum(st["entries_by_kind"].values()) == st["entries"], "the kinds add up: %s" % st)
    out, _ = c.run("stats")
    check(re.search(r"^Entries:\s+2\s+\(1 cubin, 0 ptx, 0 ltoir, 1 data\)", out, re.M), out)
    check(re.search(r"^Hits:\s+1 /\s+2 \( 50\.00 %\)", out, re.M), out)
    check("nvrtc-loaded no" in reports[1], "a hit leaves NVIDIA's NVRTC unloaded: %s" % reports)
    shim = os.path.realpath(c.run("run", "--print-shim")[0].strip())
    paths = [r.partition(" nvrtc-path ")[2] for r in reports]
    check(len(paths) == 2 and all(os.path.isfile(p) and p != shim and
                                  os.path.basename(p).startswith("libnvrtc.so") for p in paths),
          "`kcache run -v` names the NVIDIA NVRTC it forwarded to, miss and hit: %s" % reports)


def test_dropin_version_on_a_hit_loads_no_nvrtc(root):
    """nvrtcVersion after a hit (PyTorch asks it; pip's file has no version in its name)."""
    c = Cache(root)
    reports = dropin_runs(c, "version")
    if reports is None:
        return
    check("nvrtc-loaded yes" in reports[0] and "misses 1" in reports[0], reports)
    check("hits 1" in reports[1] and "nvrtc-loaded no" in reports[1],
          "the hit and its nvrtcVersion left NVIDIA's NVRTC unloaded: %s" % reports)
    versions = [l for out in c.outputs for l in out.splitlines() if l.startswith("version ")]
    check(len(versions) == 2 and versions[0] == versions[1] and versions[0] != "version 0.0",
          "the same answer as NVIDIA's library gave: %s" % versions)


def test_verify_recompile_rebuilds_dropin_entries(root):
    """The drop-in's CUBIN is rebuilt with the NVRTC that made it."""
    c = Cache(root)
    if dropin_runs(c, n=1) is None:
        return
    c.run("compile", SAXPY, "--arch", "sm_80")
    out, _ = c.run("verify", "--recompile")
    check("another toolchain" not in out, "the drop-in's entries were made here: %r" % out)
    check("2 identical" in out and "no source kept" not in out, out)
    j = c.json("verify", "--recompile")
    check(j["recompile"]["identical"] == 2, j["recompile"])
    reasons = j["recompile"]["skipped_by_reason"]
    check(list(reasons.values()) in ([], [1]) and all("record" in r for r in reasons),
          "only the drop-in's record of NVRTC's version is not a compile: %s" % reasons)


# ---- ccache's habits ----------------------------------------------------------


def test_ccache_first_five(root):
    """-s, -z, -M 5G, -C, -p: what a ccache user types first."""
    c = Cache(root)
    c.fill(3)
    out, _ = c.run("-s")
    check(re.search(r"^Entries:\s+3\b", out, re.M), "-s is stats: %r" % out)
    out, _ = c.run("-z")
    check("zeroed" in out.lower(), "-z zeroes: %r" % out)
    out, _ = c.run("-M", "5G")
    check("5.00 GiB" in out, "-M says what it set: %r" % out)
    check(c.json("stats")["max_size"] == 5 * GiB, "-M 5G saved")
    c.run("-M", "5")
    check(c.json("stats")["max_size"] == 5 * GiB, "-M 5 is 5 GiB, as ccache reads it")
    c.run("-M", "0")
    check(c.json("stats")["max_size"] is None, "-M 0: no cap")
    out, _ = c.run("-p")
    check(re.search(r"^max_size\s+none\s+file", out, re.M), "-p shows the settings: %r" % out)
    out, _ = c.run("-C")
    check(c.json("stats")["entries"] == 0, "-C clears: %r" % out)


def test_ccache_other_options(root):
    c = Cache(root)
    c.fill(4)
    out, _ = c.run("-V")
    check(out.startswith("kcache "), "-V: %r" % out)
    out, _ = c.run("-o", "max_size=2G")
    check(c.run("config", "max_size")[0].strip() == "2.00 GiB", "-o key=value sets it")
    c.run("-o", "max_size", rc=2)
    c.run("--max-size", "1G", "-o", "compression=lz4")
    check(c.run("config", "compression")[0].strip() == "lz4", "-o after another option")
    out, _ = c.run("--evict-older-than", "1d")
    check(c.json("stats")["entries"] == 4, "nothing older than a day: %r" % out)
    out, _ = c.run("--evict-older-than", "0s")
    check(c.json("stats")["entries"] == 0, "--evict-older-than 0s evicts all: %r" % out)
    c.run("--evict-older-than", "soon", rc=2)
    c.run("-s", "stats", rc=2)  # an alias is the whole command


def test_ccache_checksum_file(root):
    c = Cache(root)
    path = os.path.join(root, "some file")
    data = b"kcache\n" * 1000
    with open(path, "wb") as f:
        f.write(data)
    out, _ = c.run("--checksum-file", path)
    want = hashlib.blake2b(data, digest_size=32).hexdigest()
    check(out.strip() == want, "BLAKE2b-256 of the file: %r, wanted %s" % (out, want))
    _, err = c.run("--checksum-file", os.path.join(root, "nope"), rc=1)
    check("nope" in err, err)
    c.run("--checksum-file", root, rc=1)


def codecs(db):
    con = sqlite3.connect(db)
    try:
        return dict(con.execute("SELECT codec, count(*) FROM entry GROUP BY codec").fetchall())
    finally:
        con.close()


def test_show_compression(root):
    c = Cache(root)
    c.fill(3, "--size", 20000)
    c.run("config", "compression", "zstd")
    c.fill(2, "--size", 20000, "--seed", 3)
    out, _ = c.run("-x")
    check(re.search(r"^lz4\s+3\s", out, re.M) and re.search(r"^zstd\s+2\s", out, re.M),
          "per-codec counts: %r" % out)
    check(re.search(r"\d+\.\d+x", out), "ratios: %r" % out)
    j = c.json("recompress", "--dry-run")
    check(j["to_recompress"] == 3 and j["codec"] == "zstd", j)


def test_recompress(root):
    c = Cache(root)
    keys = c.fill(30, "--size", 20000)
    before = c.snapshot()
    check(codecs(c.db) == {3: 30}, "lz4 (blocks) first: %s" % codecs(c.db))
    c.run("config", "compression", "zstd")
    out, _ = c.run("recompress")
    check("30" in out, out)
    check(codecs(c.db) == {1: 30}, "all zstd now: %s" % codecs(c.db))
    check(c.snapshot() == before, "every entry served as it was")
    out, _ = c.run("recompress")
    check(out.startswith("Nothing to recompress"), out)
    # -X LEVEL: ccache's spelling, the setting and the work in one.
    out, _ = c.run("-X", "none")
    check(codecs(c.db) == {0: 30}, "none: raw: %s" % codecs(c.db))
    check(c.run("config", "compression")[0].strip() == "none", "-X saved the setting")
    c.run("-X", "19", rc=2)
    c.run("-X", "lz4")
    check(codecs(c.db) == {3: 30} and c.snapshot() == before, "back to lz4, same bytes")
    out, _ = c.run("verify")
    # Killed mid-run: each batch is a transaction; what was done stays, nothing is lost.
    c.run("config", "compression", "zstd")
    p = subprocess.Popen([base.KCACHE, "recompress", "--batch", "1"], env=c.env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    import time
    deadline = time.time() + 30
    while codecs(c.db).get(1, 0) == 0 and p.poll() is None and time.time() < deadline:
        time.sleep(0.002)
    running = p.poll() is None
    p.kill()
    p.communicate()
    mixed = codecs(c.db)
    if running and mixed.get(3):
        print("     killed with %s" % mixed)
    check(sum(mixed.values()) == 30, "no entry lost: %s" % mixed)
    check(c.snapshot() == before, "every entry served as it was after the kill")
    c.run("recompress")
    check(codecs(c.db) == {1: 30}, "finished: %s" % codecs(c.db))
    check(set(c.entries()) == set(keys), "the same keys")


def main():
    return base.run_tests(globals())


if __name__ == "__main__":
    sys.exit(main())

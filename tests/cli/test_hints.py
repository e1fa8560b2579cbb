#!/usr/bin/env python3
"""Messages that point at the fix, and what a deployment asks of the cache.

Usage: test_hints.py KCACHE KCACHE_FILL [TEST-NAME...]

Each test is a row of what a new user tripped over in the third round
(issue 38): what they typed, and the words that must come back.
"""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_cli as base  # noqa: E402  (the same harness, same arguments)
from kctest import Cache, check  # noqa: E402  (on the path test_cli set)


def test_mistyped_verb_names_the_nearest(root):
    """kcache list, stat, compil: the verb meant, named; exit 2."""
    c = Cache(root)
    for typed, meant in (("list", "ls"), ("stat", "stats"), ("compil", "compile"),
                         ("status", "stats"), ("verfy", "verify"), ("Stats", "stats"),
                         ("rm", "clear"), ("show", "inspect")):
        _, err = c.run(typed, rc=2)
        check("no verb '%s'" % typed in err and "did you mean '%s'?" % meant in err,
              "%s: %r" % (typed, err))
        _, err = c.run("help", typed, rc=2)
        check("did you mean '%s'?" % meant in err, "help %s: %r" % (typed, err))
    _, err = c.run("frobnicate", rc=2)
    check("did you mean" not in err and "kcache --help" in err,
          "nothing near: the verbs' list is named instead: %r" % err)


def test_version_spellings_agree(root):
    """--version, -V and version print one line, the same."""
    c = Cache(root)
    a = c.run("--version")[0]
    b = c.run("version")[0]
    v = c.run("-V")[0]
    check(a == b == v and a.count("\n") == 1, "%r %r %r" % (a, b, v))


def compiles(c, tmp, name, text, *args, env=None):
    """Compiles TEXT saved as NAME; returns (exit status, stdout, stderr)."""
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write(text)
    p = subprocess.run([base.KCACHE, "compile", path] + list(args),
                       env=dict(c.env, **(env or {})),
                       capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def have_nvrtc(c, tmp):
    rc, _, err = compiles(c, tmp, "probe.cu", "__global__ void k() {}\n", "--arch", "sm_90",
                          "--no-cache")
    if rc != 0:
        print("note: no NVRTC here (%s): the compile rows are not checked" % err.strip())
    return rc == 0


def test_toolkit_header_names_its_directory(root):
    """<cuda_fp16.h> without -I: the row says which -I to add."""
    c = Cache(root)
    if not have_nvrtc(c, root):
        return
    rc, out, _ = compiles(c, root, "half.cu", "#include <cuda_fp16.h>\n"
                          "__global__ void k(__half *x) { x[0] = __float2half(1.0f); }\n",
                          "--arch", "sm_90")
    check(rc == 1 and re.search(r'cuda_fp16\.h.*add -I /\S+/include$', out, re.M),
          "the row names the toolkit's include directory: %r" % out)
    rc, out, _ = compiles(c, root, "cub.cu", "#include <cub/cub.cuh>\n__global__ void k() {}\n",
                          "--arch", "sm_90", "--std", "c++17")
    check(rc == 1 and re.search(r'add -I /\S+/include/cccl$', out, re.M),
          "CCCL's headers: its own directory: %r" % out)
    rc, out, _ = compiles(c, root, "mine.cu", '#include "not_there.h"\n__global__ void k() {}\n',
                          "--arch", "sm_90")
    check(rc == 1 and "not_there.h" in out and "add -I" not in out,
          "a header of nobody's: no hint: %r" % out)


def test_unknown_architecture_is_named(root):
    """--arch sm_999: the message names it and the ones NVRTC knows; a bad request."""
    c = Cache(root)
    if not have_nvrtc(c, root):
        return
    rc, out, _ = compiles(c, root, "ok.cu", "__global__ void k(int *x) { x[0] = 1; }\n",
                          "--arch", "sm_999")
    check(rc == 1 and re.search(r"sm_999 is not an architecture this NVRTC knows: sm_\d+ \.\.\. "
                                r"sm_\d+", out), out)
    st = c.json("stats")
    check(st["request_errors"] == 1 and st["errors"] == 0,
          "counted as a bad request, as the README says: %s" % st)
    rc, out, _ = compiles(c, root, "ok.cu", "__global__ void k(int *x) { x[0] = 1; }\n",
                          "--arch", "sm_90", "--", "--no-such-option")
    check(rc == 1 and "NVRTC refused an option" in out and "--no-such-option" in out, out)


def test_compile_error_is_the_first_error_line(root):
    """A source NVRTC rejects: the library's message is its first error line."""
    c = Cache(root)
    if not have_nvrtc(c, root):
        return
    rc, out, _ = compiles(c, root, "bad.cu", "__global__ void k(int *x) { x[0] = y; }\n",
                          "--arch", "sm_90", "--json")
    item = json.loads(out)["items"][0]
    check(rc == 1 and 'identifier "y" is undefined' in item["message"],
          "the message says what is wrong: %s" % item)


def test_cache_off_says_so_in_the_row(root):
    """KCACHE_DISABLE=1: the uncached row says the cache is off, and by what,
    also after the output path (-o) it names."""
    c = Cache(root)
    if not have_nvrtc(c, root):
        return
    path = os.path.join(root, "ok.cu")
    with open(path, "w") as f:
        f.write("__global__ void k(int *x) { x[0] = 1; }\n")
    out, _ = c.run("compile", path, "--arch", "sm_90", env={"KCACHE_DISABLE": "1"})
    check(out.startswith("uncached") and "KCACHE_DISABLE" in out, out)
    out_path = os.path.join(root, "ok.cubin")
    out, _ = c.run("compile", path, "--arch", "sm_90", "-o", out_path,
                   env={"KCACHE_DISABLE": "1"})
    check(out.startswith("uncached") and out_path in out and "KCACHE_DISABLE" in out, out)


def test_require_hit_fails_a_cold_start(root):
    """KCACHE_REQUIRE_HIT=1 / --require-hit: a miss is an error, nothing compiled."""
    c = Cache(root)
    if not have_nvrtc(c, root):
        return
    path = os.path.join(root, "warm.cu")
    with open(path, "w") as f:
        f.write("__global__ void k(int *x) { x[0] = 2; }\n")
    for how in ({"env": {"KCACHE_REQUIRE_HIT": "1"}, "args": []},
                {"env": {}, "args": ["--require-hit"]}):
        out, _ = c.run("compile", path, "--arch", "sm_90", *how["args"], rc=1, env=how["env"])
        check(out.startswith("error") and "require_hit" in out, out)
    st = c.json("stats")
    check(st["entries"] == 0 and st["misses"] == 0, "nothing compiled or stored: %s" % st)
    c.run("compile", path, "--arch", "sm_90")
    out, _ = c.run("compile", path, "--arch", "sm_90", "--require-hit")
    check(out.startswith("hit"), "a warm cache serves it: %r" % out)


def test_request_log_explains_after_the_fact(root):
    """KCACHE_LOG=FILE: a line per request, with the outcome and the reason."""
    c = Cache(root)
    if not have_nvrtc(c, root):
        return
    log = os.path.join(root, "requests.log")
    env = {"KCACHE_LOG": log}
    path = os.path.join(root, "logged.cu")
    with open(path, "w") as f:
        f.write("__global__ void k(int *x) { x[0] = 3; }\n")
    c.run("compile", path, "--arch", "sm_90", env=env)
    c.run("compile", path, "--arch", "sm_90", env=env)
    c.run("compile", path, "--arch", "sm_90", env=dict(env, KCACHE_DISABLE="1"))
    with open(os.path.join(root, "bad.cu"), "w") as f:
        f.write("__global__ void k(int *x) { x[0] = y; }\n")
    c.run("compile", os.path.join(root, "bad.cu"), "--arch", "sm_90", env=env, rc=1)
    with open(log) as f:
        lines = f.read().splitlines()
    outcomes = [re.search(r" outcome=(\S+)", l).group(1) for l in lines]
    check(outcomes == ["miss", "hit", "uncached", "error"], "%s\n%s" % (outcomes, lines))
    key = c.json("ls")["entries"][0]["key"]
    check(all(re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z pid=\d+ key=", l) for l in lines)
          and ("key=%s " % key) in lines[0] and ("key=%s " % key) in lines[1], lines)
    check("source=" in lines[0] and "logged.cu" in lines[0], lines[0])
    check("reason=the cache is off" in lines[2] and 'identifier "y"' in lines[3], lines)
    check(os.stat(log).st_mode & 0o777 == 0o600, "the log is the user's alone")
    # Why a miss missed: nothing remembered for it, or what was remembered no longer holds.
    check("reason=nothing remembered for this source and options" in lines[0], lines[0])
    hdr = os.path.join(root, "inc", "v.h")
    os.makedirs(os.path.dirname(hdr))
    with open(hdr, "w") as f:
        f.write("#define V 1\n")
    os.utime(hdr, (1, 1))
    with open(os.path.join(root, "uses.cu"), "w") as f:
        f.write('#include "v.h"\n__global__ void k(int *x) { x[0] = V; }\n')
    uses = [os.path.join(root, "uses.cu"), "--arch", "sm_90", "--", "-I" + os.path.dirname(hdr)]
    c.run("compile", *uses, env=env)
    with open(hdr, "w") as f:
        f.write("#define V 2\n")
    c.run("compile", *uses, env=env)
    with open(log) as f:
        last = f.read().splitlines()[-1]
    check(" outcome=miss " in last and "reason=a header changed since it was remembered" in last,
          last)
    # Never through a link another user could have planted.
    os.symlink(os.path.join(root, "elsewhere"), os.path.join(root, "linked.log"))
    out, err = c.run("compile", path, "--arch", "sm_90", env={"KCACHE_LOG":
                                                              os.path.join(root, "linked.log")})
    check(out.startswith("hit") and not os.path.exists(os.path.join(root, "elsewhere")),
          "a link is not followed, and the compile still hits: %r %r" % (out, err))
    check("request log" in err, "the user is told the log is not written: %r" % err)


def test_unusable_settings_still_compile(root):
    """A settings file kcache cannot use (unreadable HOME, a bad line): compile
    still compiles, uncached, saying why; verbs that need the cache refuse."""
    c = Cache(root)
    if not have_nvrtc(c, root):
        return
    os.makedirs(c.dir, exist_ok=True)
    with open(os.path.join(c.dir, "kcache.conf"), "w") as f:
        f.write("no_such_setting = 1\n")
    path = os.path.join(root, "k.cu")
    with open(path, "w") as f:
        f.write("__global__ void k(int *x) { x[0] = 4; }\n")
    out, err = c.run("compile", path, "--arch", "sm_90")
    check(out.startswith("uncached") and "kcache.conf:1" in err, "%r %r" % (out, err))
    _, err = c.run("stats", rc=2)
    check("kcache.conf:1" in err, err)


def test_request_log_never_stalls_or_borrows(root):
    """KCACHE_LOG naming a FIFO or another user's file: the compile goes on, unlogged."""
    c = Cache(root)
    if not have_nvrtc(c, root):
        return
    path = os.path.join(root, "f.cu")
    with open(path, "w") as f:
        f.write("__global__ void k(int *x) { x[0] = 5; }\n")
    fifo = os.path.join(root, "fifo")
    os.mkfifo(fifo)
    out, err = c.run("compile", path, "--arch", "sm_90", env={"KCACHE_LOG": fifo})
    check(out.startswith("miss") and "request log" in err, "%r %r" % (out, err))
    if os.geteuid() == 0:
        theirs = os.path.join(root, "theirs.log")
        open(theirs, "w").close()
        os.chown(theirs, 54321, 54321)
        out, err = c.run("compile", path, "--arch", "sm_90", env={"KCACHE_LOG": theirs})
        check(out.startswith("hit") and os.path.getsize(theirs) == 0 and "another user" in err,
              "another user's file is not appended to: %r %r" % (out, err))
    else:
        print("note: not root: the other user's log file is not checked")


def test_require_hit_says_why_truly(root):
    """require_hit with --no-cache: the cache was not in use, not 'not in the cache'."""
    c = Cache(root)
    if not have_nvrtc(c, root):
        return
    path = os.path.join(root, "r.cu")
    with open(path, "w") as f:
        f.write("__global__ void k(int *x) { x[0] = 6; }\n")
    out, _ = c.run("compile", path, "--arch", "sm_90", "--require-hit", "--no-cache", rc=1)
    check("not in the cache" not in out and "require_hit" in out, out)


def test_bare_size_of_bytes_is_refused(root):
    """KCACHE_MAX_SIZE=10000000000 (bytes, as kcache once read it): refused, not 9.31 EiB."""
    c = Cache(root)
    _, err = c.run("stats", rc=2, env={"KCACHE_MAX_SIZE": "10000000000"})
    check("1000B" in err, err)
    out, _ = c.run("stats", env={"KCACHE_MAX_SIZE": "10000000000B"})
    check(re.search(r"^Cap:\s+9\.31 GiB", out, re.M), out)


def test_output_into_a_group_directory(root):
    """compile -o into a directory its group may write (umask 002, or 2775): written."""
    c = Cache(root)
    if not have_nvrtc(c, root):
        return
    path = os.path.join(root, "g.cu")
    with open(path, "w") as f:
        f.write("__global__ void k(int *x) { x[0] = 7; }\n")
    shared = os.path.join(root, "project")
    os.mkdir(shared)
    os.chmod(shared, 0o2775)
    c.run("compile", path, "--arch", "sm_90", "-o", os.path.join(shared, "g.cubin"))
    check(os.path.getsize(os.path.join(shared, "g.cubin")) > 0, "written")
    os.chmod(shared, 0o777)
    out, _ = c.run("compile", path, "--arch", "sm_90", "-o", os.path.join(shared, "h.cubin"),
                   rc=1)
    check("anyone" in out and not os.path.exists(os.path.join(shared, "h.cubin")), out)


def test_ccache_aliases_where_the_meaning_is_the_same(root):
    """ccache's -sv, -d DIR, -k KEY, --print-stats, --evict-namespace,
    --config-path, -s --json: the same meaning here; -F says what kcache has."""
    c = Cache(root)
    c.fill(3, "--arch", "sm_80")
    c.fill(2, "--arch", "sm_90", "--seed", 2)
    c.fill(2, "--namespace", "triton", "--seed", 3)
    for spelling in (["-sv"], ["-s", "-v"], ["-vs"], ["-s", "--verbose"]):
        out, _ = c.run(*spelling)
        check(re.search(r"^Entries:\s+7\b", out, re.M), "%s is stats: %r" % (spelling, out))
    j = json.loads(c.run("-s", "--json")[0])
    check(j["entries"] == 7, "-s --json is stats --json: %s" % j)
    out, _ = c.run("-sz")
    check(re.search(r"^Entries:\s+7\b", out, re.M) and c.json("stats")["hits"] == 0,
          "-sz shows, then zeroes: %r" % out)
    c.run("-v", rc=2)
    j = json.loads(c.run("--print-stats")[0])
    check(j["entries"] == 7, "--print-stats: machine-readable: %s" % j)
    other = Cache(root, "other")
    other.fill(1)
    for spelling in (["-d", other.dir], ["--dir", other.dir], ["-d" + other.dir]):
        out, _ = c.run(*spelling, "-s")
        check(re.search(r"^Entries:\s+1\b", out, re.M), "%s: that cache: %r" % (spelling, out))
    out, _ = c.run("-d", other.dir, "ls")
    check(out.count("\n") == 2, "-d before a verb: a header and one entry: %r" % out)
    c.run("-M", "3G")
    for spelling in (["-k", "max_size"], ["--get-config", "max_size"],
                     ["--get-config=max_size"]):
        out, _ = c.run(*spelling)
        check(out == "3.00 GiB\n", "%s prints the value alone: %r" % (spelling, out))
    c.run("-k", "no_such", rc=2)
    conf = os.path.join(root, "elsewhere.conf")
    with open(conf, "w") as f:
        f.write("compression = none\n")
    os.chmod(conf, 0o600)
    out, _ = c.run("--config-path", conf, "-k", "compression")
    check(out == "none\n", "--config-path reads that file: %r" % out)
    out, _ = c.run("--config-path", conf, "config", "compression", "--json")
    check(json.loads(out)["origin"].startswith(conf), out)
    out, _ = c.run("--evict-namespace", "triton")
    st = c.json("stats")
    check(st["entries"] == 5, "--evict-namespace: that namespace's entries only: %r %s"
          % (out, st))
    _, err = c.run("-F", "1000", rc=2)
    check("max-entries" in err and "size" in err, "-F: kcache caps by size; says so: %r" % err)
    _, err = c.run("--max-files", "0", rc=2)
    check("max-entries" in err, err)


def test_prune_arch_alone(root):
    """prune --arch sm_80 (or --kind, --namespace) alone prunes what it names."""
    c = Cache(root)
    c.fill(3, "--arch", "sm_80")
    c.fill(2, "--arch", "sm_90", "--seed", 2)
    c.fill(1, "--arch", "sm_90", "--kind", "ptx", "--seed", 4)
    out, _ = c.run("prune", "--arch", "sm_80")
    archs = sorted(e["arch"] for e in c.json("ls")["entries"])
    check(archs == ["sm_90"] * 3, "only sm_80 went: %r %s" % (out, archs))
    c.run("prune", "--kind", "ptx")
    check(c.json("stats")["entries"] == 2, "--kind alone")
    c.run("prune", "--arch", "sm_90", "--older-than", "1d")
    check(c.json("stats")["entries"] == 2, "with an age, the age still counts")


def test_config_table_aligned(root):
    """kcache config: every row's value, origin and place start in the header's columns."""
    c = Cache(root)
    out, _ = c.run("config")
    lines = out.split("\n\n")[0].splitlines()
    head = lines[0]
    cols = [head.index(w) for w in ("VALUE", "FROM", "WHERE")]
    for line in lines[1:]:
        check(all(len(line) <= col or line[col - 1] == " " for col in cols)
              and line[cols[1]] != " ", "%r is not in the columns of %r" % (line, head))
    check(any(l.startswith("import_require_signature ") for l in lines), lines)


def test_jobs_default_to_the_cpus(root):
    """compile's -j: the CPUs this process may use by default and with -j auto."""
    c = Cache(root)
    if not have_nvrtc(c, root):
        return
    paths = []
    for i in range(3):
        paths.append(os.path.join(root, "j%d.cu" % i))
        with open(paths[-1], "w") as f:
            f.write("__global__ void k(int *x) { x[0] = %d; }\n" % (10 + i))
    cpus = len(os.sched_getaffinity(0))
    j = c.json("compile", *paths, "--arch", "sm_90")
    check(j["jobs"] == min(cpus, 3), "by default, one a CPU: %s (CPUs %d)" % (j["jobs"], cpus))
    j = c.json("compile", *paths, "--arch", "sm_90", "-j", "auto")
    check(j["jobs"] == min(cpus, 3), "-j auto: %s" % j["jobs"])
    j = c.json("compile", *paths, "--arch", "sm_90", "--jobs=1")
    check(j["jobs"] == 1, "-j 1: %s" % j["jobs"])
    if os.path.exists("/usr/bin/taskset"):
        p = subprocess.run(["taskset", "-c", "0", base.KCACHE, "compile"] + paths +
                           ["--arch", "sm_90", "--json"], env=c.env, capture_output=True,
                           text=True, timeout=300)
        check(json.loads(p.stdout)["jobs"] == 1, "the CPUs it may run on: %s" % p.stdout[-200:])
    _, err = c.run("compile", paths[0], "--arch", "sm_90", "-j", "many", rc=2)
    check("auto" in err, err)


def test_export_namespace(root):
    """export --namespace NS: the bundle holds that namespace's entries, as ls shows them."""
    c = Cache(root)
    c.fill(3)
    c.fill(2, "--namespace", "triton", "--seed", 5)
    bundle = os.path.join(root, "triton.kcache")
    out, _ = c.run("export", bundle, "--namespace", "triton")
    other = Cache(root, "other")
    other.run("import", bundle)
    check(other.json("stats")["entries"] == 2
          and len(other.json("ls", "--namespace", "triton")["entries"]) == 2,
          "only triton's two: %r" % out)
    c.run("export", bundle, "--namespace", "a b", rc=2)


def test_require_hit_in_the_drop_in(root):
    """KCACHE_REQUIRE_HIT=1 under kcache run: a miss is NVRTC_ERROR_COMPILATION (6),
    the log says why, NVRTC is never loaded; the run's report counts it; a hit serves."""
    c = Cache(root)
    user = os.environ.get("NVRTC_USER")
    if not user or not have_nvrtc(c, root):
        print("note: no nvrtc-user or no NVRTC: the drop-in's require_hit is not checked")
        return
    path = os.path.join(root, "cold.cu")
    with open(path, "w") as f:
        f.write("__global__ void k(int *x) { x[0] = 8; }\n")
    env = {"KCACHE_REQUIRE_HIT": "1", "ASAN_OPTIONS": "detect_leaks=0:verify_asan_link_order=0"}
    out, err = c.run("run", "-v", user, path, "sm_90", env=env, rc=1)
    check(out.startswith("6 0\n") and "require_hit" in out and out.count("\n") == 2,
          "a miss fails as NVRTC's compile error, its log saying why: %r" % out)
    check("nvrtc-loaded no" in err and "require-hit-refused 1" in err, err)
    check(c.json("stats")["entries"] == 0, "nothing compiled or stored")
    c.run("run", user, path, "sm_90", env={"ASAN_OPTIONS": env["ASAN_OPTIONS"]})
    out, err = c.run("run", "-v", user, path, "sm_90", env=env)
    check(out.startswith("0 ") and "hits 1" in err, "a warm cache serves it: %r %r" % (out, err))


def test_pip_cuda_in_the_active_environment(root):
    """CUDA_HOME pointing nowhere, pip's nvidia/cu13 in the active venv ($VIRTUAL_ENV):
    kcache compile finds pip's NVRTC and headers (the hint names them)."""
    c = Cache(root)
    if not have_nvrtc(c, root):
        return
    toolkit = os.path.realpath(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    venv = os.path.join(root, "venv")
    cu = os.path.join(venv, "lib", "python3.11", "site-packages", "nvidia", "cu13")
    os.makedirs(os.path.join(cu, "lib"))
    real = os.path.realpath(os.path.join(toolkit, "lib64"))
    for name in os.listdir(real):
        if name.startswith(("libnvrtc.so", "libnvrtc-builtins.so")):
            os.symlink(os.path.join(real, name), os.path.join(cu, "lib", name))
    os.symlink(os.path.join(toolkit, "include"), os.path.join(cu, "include"))
    env = {"CUDA_HOME": "/opt/none", "CUDA_PATH": "/opt/none"}
    rc, _, err = compiles(c, root, "p.cu", "__global__ void k(int *x) { x[0] = 11; }\n",
                          "--arch", "sm_90", env=env)
    check(rc == 1 and "no CUDA toolkit at /opt/none" in err and "nvidia-cuda-nvrtc" in err,
          "no venv: the hint names CUDA_HOME and pip's NVRTC: %r" % err)
    env["VIRTUAL_ENV"] = venv
    rc, out, _ = compiles(c, root, "p.cu", "__global__ void k(int *x) { x[0] = 11; }\n",
                          "--arch", "sm_90", env=env)
    check(rc == 0 and out.startswith("miss"), "pip's NVRTC compiles it: %r" % out)
    rc, out, _ = compiles(c, root, "half.cu", "#include <cuda_fp16.h>\n"
                          "__global__ void k(__half *x) { x[0] = __float2half(1.0f); }\n",
                          "--arch", "sm_90", env=env)
    check(rc == 1 and ("add -I %s/include" % cu) in out, "the hint names pip's headers: %r" % out)


def main():
    return base.run_tests(globals())


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""A new user, from the README and the man page: their commands, run as written.

Usage: test_new_user.py KCACHE KCACHE_FILL SOURCE_ROOT BUILD_ROOT [TEST-NAME...]

Every command run here is first looked up word for word in README.md (its
shell lines joined where they continue with a backslash) or in kcache(1)'s
text, so documentation that drifts from what works fails this test. The install goes into a
scratch DESTDIR from the build at hand (meson install --no-rebuild), and the
files are checked where the README says they land. Compiles need NVRTC (a
CUDA toolkit); without it those are skipped with a note. The rows of the
table of what a new user tripped over are test_ux.py's, in the same suite.
"""
import glob
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
BUILD_ROOT = os.path.abspath(sys.argv.pop(4)) if len(sys.argv) > 4 else None
SOURCE_ROOT = os.path.abspath(sys.argv.pop(3)) if len(sys.argv) > 3 else None
import test_cli as base  # noqa: E402
from kctest import Cache, check  # noqa: E402  (on the path test_cli set)

with open(os.path.join(SOURCE_ROOT, "README.md")) as _f:
    README = re.sub(r" *\\\n\s*", " ", _f.read())
with open(os.path.join(SOURCE_ROOT, "doc", "kcache.1")) as _f:
    # The man page's text as a reader sees it: font changes dropped, \- a dash.
    MAN = re.sub(r"\\f[BIRP]", "", _f.read()).replace("\\-", "-").replace("\\e", "\\")


def in_readme(command):
    """The command as the README or the man page spells it."""
    check(command in README or command in MAN, "the README or kcache(1) has %r" % command)
    return command


def kcache(c, command, rc=0, env=None):
    """Runs a README command line that starts with 'kcache' in the cache c, from SOURCE_ROOT."""
    in_readme(command)
    args = shlex.split(command)
    check(args[0] == "kcache", command)
    e = dict(c.env)
    e.update(env or {})
    p = subprocess.run([base.KCACHE] + args[1:], env=e, capture_output=True, cwd=c.cwd,
                       timeout=300)
    out, err = p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
    if rc is not None and p.returncode != rc:
        raise base.Failure("%s: exit %d, wanted %d\nstdout: %s\nstderr: %s"
                           % (command, p.returncode, rc, out[:2000], err[:2000]))
    return out, err


def new_cache(root):
    c = Cache(root)
    c.cwd = root
    return c


def can_compile(c):
    p = subprocess.run([base.KCACHE, "compile", os.path.join(SOURCE_ROOT, "examples", "saxpy.cu"),
                        "--arch", "sm_90", "--no-cache"], env=c.env, capture_output=True)
    if p.returncode != 0:
        print("note: no NVRTC here: the README's compiles are not run")
    return p.returncode == 0


def test_install_puts_things_where_the_readme_says(root):
    check("meson setup build-user -Dtests=false -Dbenchmarks=false" in README
          and "meson install -C build-user" in README, "the README's install lines")
    with open(os.path.join(SOURCE_ROOT, "meson_options.txt")) as f:
        options = f.read()
    check("option('tests'" in options and "option('benchmarks'" in options,
          "the user build's options exist")
    if not os.access(os.path.join(BUILD_ROOT, "meson-logs"), os.W_OK):
        print("note: the build directory is another user's: meson install cannot log there")
        return
    dest = os.path.join(root, "dest")
    p = subprocess.run(["meson", "install", "-C", BUILD_ROOT, "--no-rebuild", "--destdir", dest],
                       capture_output=True, timeout=300)
    check(p.returncode == 0, "meson install: %s" % p.stderr.decode()[-2000:])
    prefix = json.loads(subprocess.run(["meson", "introspect", "--buildoptions", BUILD_ROOT],
                                       capture_output=True).stdout)
    opt = {o["name"]: o["value"] for o in prefix}
    top = dest + opt["prefix"]
    libdir = os.path.join(top, opt["libdir"])
    want = {
        "bin/kcache": os.path.join(top, "bin", "kcache"),
        "libkcache.so": os.path.join(libdir, "libkcache.so"),
        "the drop-in": os.path.join(libdir, "kcache", "libnvrtc.so.13"),
        "kcache(1)": os.path.join(top, "share", "man", "man1", "kcache.1"),
        "kcache-json(7)": os.path.join(top, "share", "man", "man7", "kcache-json.7"),
        "the completion": os.path.join(top, "share", "bash-completion", "completions", "kcache"),
        "the headers": os.path.join(top, "include", "kcache", "compile.h"),
    }
    for what, path in want.items():
        check(os.path.exists(path), "%s installed at %s: %s" % (what, path,
                                                               sorted(glob.glob(top + "/**", recursive=True))[:40]))
    # Installed into a prefix of the user's own, kcache finds its library itself.
    runpath = subprocess.run(["readelf", "-d", want["bin/kcache"]], capture_output=True).stdout.decode()
    check(re.search(r"R(UN)?PATH.*\[%s\]" % re.escape(os.path.join(opt["prefix"], opt["libdir"])),
                    runpath), "the installed kcache names its libdir: %s" % runpath)
    check("lib/<arch>/kcache/libnvrtc.so.13" in README and "share/bash-completion/completions/kcache"
          in README and "/usr/local/bin" in README, "the README says where each goes")
    # The installed kcache finds the installed drop-in.
    out = subprocess.run([want["bin/kcache"], "run", "--print-shim"], capture_output=True,
                         env=dict(os.environ, ASAN_OPTIONS="verify_asan_link_order=0"))
    check(out.stdout.decode().strip() == os.path.realpath(want["the drop-in"]),
          "run --print-shim from the install: %r" % out)
    readme_c_example(root, dest, top, libdir, opt)


def readme_c_example(root, dest, top, libdir, opt):
    """The README's C example, built as it says (pkg-config, an rpath to the libdir) against the
    install in dest and run twice in a fresh cache: a miss, then a hit."""
    with open(os.path.join(SOURCE_ROOT, "README.md")) as f:
        text = f.read()
    snippet = re.search(r"```c\n(.*?)```", text, re.S)
    check(snippet is not None, "the README has a C example")
    build = re.search(r"^(cc app\.c .*)$", text, re.M)
    check(build is not None and "pkg-config --cflags --libs kcache" in build.group(1),
          "the README builds it with pkg-config")
    c = new_cache(root)
    if not can_compile(c):
        return
    work = os.path.join(root, "capp")
    os.makedirs(work)
    with open(os.path.join(work, "app.c"), "w") as f:
        f.write("#include <stdio.h>\n"
                "static void use(const void *data, size_t size, int hit)\n"
                "{\n    (void)data;\n    printf(\"%s %zu\\n\", hit ? \"hit\" : \"miss\", size);\n}\n"
                "int main(void)\n{\n" + snippet.group(1) + "    return 0;\n}\n")
    with open(os.path.join(SOURCE_ROOT, "examples", "block_sort.cu")) as f, \
            open(os.path.join(work, "block_sort.cu"), "w") as g:
        g.write(f.read())
    # The .pc file names the real prefix; PKG_CONFIG_SYSROOT_DIR puts dest before it.
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(libdir, "pkgconfig"),
               PKG_CONFIG_SYSROOT_DIR=dest)
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "kcache"], env=env,
                           capture_output=True, text=True)
    check(flags.returncode == 0, "pkg-config finds kcache: %s" % flags.stderr)
    sanitize = [] if opt.get("b_sanitize", "none") in ("none", "") else \
        ["-fsanitize=" + opt["b_sanitize"]]
    cc = subprocess.run(["cc", "app.c", "-o", "app"] + shlex.split(flags.stdout) + sanitize +
                        ["-Wl,-rpath," + libdir], cwd=work, capture_output=True, text=True)
    check(cc.returncode == 0, "the README's C example builds: %s" % cc.stderr[-2000:])
    runs = []
    for _ in range(2):
        # The rpath, not the tests' LD_LIBRARY_PATH, must find the installed library.
        run_env = {k: v for k, v in c.env.items() if k != "LD_LIBRARY_PATH"}
        run_env["ASAN_OPTIONS"] = "verify_asan_link_order=0:detect_leaks=0"
        p = subprocess.run(["./app"], cwd=work, capture_output=True, text=True, timeout=300,
                           env=run_env)
        runs.append(p.stdout.split(" ")[0] if p.returncode == 0 else p.stderr[-500:])
    check(runs == ["miss", "hit"], "the README's C example: a miss, then a hit: %r" % runs)
    print("the README's C example, built with pkg-config against the install: %s" % runs)


def test_quick_start(root):
    """The first command of the README: a miss, then a hit, then the stats."""
    c = new_cache(root)
    c.cwd = SOURCE_ROOT
    if not can_compile(c):
        return
    cmd = "./build/cli/kcache compile examples/block_sort.cu --arch sm_90 -I /usr/local/cuda/include/cccl --std c++17"
    in_readme(cmd)
    if not os.path.isdir("/usr/local/cuda/include/cccl"):
        print("note: no CCCL here: block_sort.cu not compiled")
        return
    rows = []
    for _ in range(2):
        out, _ = kcache(c, cmd.replace("./build/cli/kcache", "kcache"))
        rows.append(out.split()[0])
    check(rows == ["miss", "hit"], "a miss, then a hit: %s" % rows)
    out, _ = kcache(c, "kcache stats")
    check(re.search(r"^Hits:\s+1 /\s+2\b", out, re.M), out)
    check(re.search(r"^Errors:\s+0\b", out, re.M), out)


def test_commands_table(root):
    c = new_cache(root)
    compiles = can_compile(c)
    k = os.path.join(root, "k.cu")
    with open(os.path.join(SOURCE_ROOT, "examples", "saxpy.cu")) as f:
        src = f.read()
    with open(k, "w") as f:
        f.write(src.replace("saxpy", "saxpy_n") + "\n#ifndef N\n#define N 1\n#endif\n")
    os.makedirs(os.path.join(root, "inc"), exist_ok=True)
    if compiles:
        out, _ = kcache(c, "kcache compile k.cu --arch sm_90,sm_80 -I inc -D N=4 --std c++17 -j 4 -o out/")
        check(sorted(os.listdir(os.path.join(root, "out"))) == ["k.sm_80.cubin", "k.sm_90.cubin"],
              "out/ made with both: %s" % out)
        out, _ = kcache(c, "kcache explain k.cu --arch sm_90 -D N=8")
        check("miss" in out.lower() or "differ" in out.lower(), out)
    else:
        c.fill(3)
    out, _ = kcache(c, "kcache stats")
    check(re.search(r"^Entries:\s+[1-9]", out, re.M), out)
    kcache(c, "kcache ls --arch sm_90 --sort size --limit 20")
    key = json.loads(c.run("ls", "--json")[0])["entries"][0]["key"]
    out, _ = kcache(c, "kcache stats -z")
    check("Counters zeroed" in out, out)
    kcache(c, "kcache prune --max-size 2G")
    out, _ = kcache(c, "kcache prune --older-than 30d --arch sm_80 --dry-run")
    check(out.startswith("Would evict 0 entries"), out)
    kcache(c, "kcache export warm.kcache --arch sm_90 --since 7d")
    check(os.path.getsize(os.path.join(root, "warm.kcache")) > 0, "a bundle")
    kcache(c, "kcache export --dir out/")
    check(os.path.exists(os.path.join(root, "out", "manifest.json")), "a manifest")
    out, _ = kcache(c, "kcache import warm.kcache --dry-run")
    check("Nothing to import" in out, "what is here already: %r" % out)
    out, _ = kcache(c, "kcache verify")
    kcache(c, "kcache config")
    out, _ = kcache(c, "kcache config max_size 8G")
    check("8.00 GiB" in out, out)
    kcache(c, "kcache config max_size none")
    check(c.run("config", "max_size")[0].strip() == "none", "no cap")
    in_readme("kcache config compression lz4 && kcache recompress")
    c.run("config", "compression", "lz4")
    out, _ = kcache(c, "kcache recompress")
    check("Recompressed" in out or "Nothing to recompress" in out, out)
    kcache(c, "kcache vacuum")
    out, _ = kcache(c, "kcache path")
    check(out.strip() == c.db, out)
    out, _ = kcache(c, "kcache version")
    check(out.startswith("kcache "), out)
    in_readme("kcache get 3fa2c1 -o k.cubin")
    c.run("get", key[:6], "-o", os.path.join(root, "k.bin"))
    in_readme("kcache inspect 3fa2c1 --log --source")
    c.run("inspect", key[:6], "--log", "--source")
    out, _ = kcache(c, "kcache clear")
    check(c.json("stats")["entries"] == 0, out)


def test_ccache_paragraph(root):
    """Each command the 'For ccache users' paragraph names, with its meaning."""
    c = new_cache(root)
    c.fill(4, "--size", 20000)
    para = README[README.index("**For ccache users.**"):]
    para = para[:para.index("\n\n")]
    for spelled in ("`kcache -s`", "`-z`", "`-C`", "`-c`", "`-p`", "`-M 5G`", "`-M 0`",
                    "`-o max_size=8G`", "`-V`", "`--evict-older-than 30d`", "`-x`", "`-X\nlz4`",
                    "`--checksum-file F`"):
        check(spelled in para, "the paragraph names %s" % spelled)
    out, _ = c.run("-s")
    check(re.search(r"^Entries:\s+4\b", out, re.M), out)
    c.run("-z")
    c.run("-M", "5G")
    check(c.json("stats")["max_size"] == 5 << 30, "-M 5G")
    c.run("-M", "0")
    check(c.json("stats")["max_size"] is None, "-M 0")
    c.run("-o", "max_size=8G")
    check(c.json("stats")["max_size"] == 8 << 30, "-o max_size=8G")
    out, _ = c.run("-p")
    check("8.00 GiB" in out, out)
    check(c.run("-V")[0].startswith("kcache "), "-V")
    out, _ = c.run("-x")
    check(re.search(r"^lz4\s+4\s", out, re.M), out)
    c.run("-X", "zstd")
    out, _ = c.run("-x")
    check(re.search(r"^zstd\s+4\s", out, re.M), out)
    c.run("-X", "lz4")
    out, _ = c.run("-x")
    check(re.search(r"^lz4\s+4\s", out, re.M), out)
    c.run("--evict-older-than", "30d")
    check(c.json("stats")["entries"] == 4, "nothing that old")
    f = os.path.join(root, "F")
    with open(f, "wb") as fh:
        fh.write(b"x" * 100)
    out, _ = c.run("--checksum-file", f)
    check(out.strip() == hashlib.blake2b(b"x" * 100, digest_size=32).hexdigest(), out)
    c.run("-c")
    c.run("-C")
    check(c.json("stats")["entries"] == 0, "-C")


def main():
    return base.run_tests(globals())


if __name__ == "__main__":
    sys.exit(main())

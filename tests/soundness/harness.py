#!/usr/bin/env python3
"""The differential soundness harness: kcache's warm results against plain NVRTC.

Random header trees and random edit sequences; after every step, what kcache
returns -- the CLI (`kcache compile`), the library within one long-lived
process (so the per-process header memo is exercised), and the drop-in NVRTC
(preloaded into a long-lived program that calls NVRTC as programs do) -- is
compared with what NVIDIA's NVRTC returns reading the disk now. A different
kernel is a failure (the worst bug a cache can have); kcache compiling
uncached is allowed and counted by reason.

Kernels take their output values from the headers (which file was included,
its macros, how many header bodies were read, __has_include's answers), so
a stale or wrong header shows in the PTX as a different constant. PTX is
compared without its comment lines (NVRTC's banner); nothing else is dropped:
the kernels use no __FILE__, no line information and no assert, the one place
kcache's hermetic compile legitimately differs (it names headers by include
spelling). Found empirically: for these kernels kcache's PTX is NVIDIA's byte
for byte, comments included (the summary counts any step where only the
comment lines differ). Warm results are also compared, byte for byte, with
kcache's own compile on an empty cache (--cold-rate of the hits).

Files are made "old" (past kcache's "too recent to trust" window) without
waiting: kcache processes get KCACHE_TEST_CLOCK_SHIFT_NS, and every edit here
is made to change the file's identity (inode, size, mtime or ctime), as a real
wait would guarantee. --real-sleep checks that shortcut: it runs scenarios
twice, with the shift and with real waits, and the outcomes must match.

A failure prints its seed and step, replays the scenario alone and shrinks its
edits (ddmin), and writes a self-contained shell script that rebuilds the tree
and runs the commands (see --keep).

    harness.py --kcache K --driver D --shim S              bounded (meson test)
    harness.py ... --long --minutes 30                     the long mode
    harness.py ... --long --steps 10000                    until 10,000 steps
    harness.py ... --scenario tree:123:aged -v             one scenario (as a DIFFERS
                                                           line names it), step by step

Exit status: 0, 1 when a result differed, 77 when NVRTC is not there.
"""
import argparse
import hashlib
import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

TOOLKIT = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
TOOLKIT_REAL = os.path.realpath(TOOLKIT)
CCCL = os.path.join(TOOLKIT, "include", "cccl")
SHIFT_NS = 10_000_000_000  # every file 10 s old to kcache's trust rule
ARCH = ["compute_90"]      # PTX without ptxas: the cheapest compile that shows a header
PATHS = ("cli", "lib", "dropin")
EDITS = [4, 10]            # edits per scenario (the long mode makes scenarios longer)


# ---- the long-lived drivers (driver.c) ------------------------------------------------------

class Driver:
    """One soundness-driver process; requests and answers in its wire format."""

    def __init__(self, exe, env):
        self.exe, self.env = exe, env
        self.p = None

    def start(self):
        if self.p is None or self.p.poll() is not None:
            self.p = subprocess.Popen([self.exe], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      env=self.env)

    def _field(self, tag, val):
        if isinstance(val, str):
            val = val.encode()
        self.p.stdin.write(b"%s %d\n" % (tag.encode(), len(val)) + val + b"\n")

    def compile(self, mode, cwd, path, opts, headers):
        return self.send(mode, cwd, path, opts, headers) or self.receive()

    def send(self, mode, cwd, path, opts, headers):
        """Sends a request (the answer is receive()'s); a Result if the driver is gone."""
        self.start()
        try:
            for tag, val in (("mode", mode), ("arch", ARCH[0]), ("cwd", cwd), ("path", path)):
                self._field(tag, val)
            for o in opts:
                self._field("opt", o)
            for name, text in headers:
                self._field("hname", name)
                self._field("htext", text)
            self._field("go", "")
            self.p.stdin.flush()
        except BrokenPipeError:
            rc = self.p.wait()
            self.p = None
            return Result(status=-9000 - (rc or 0), message="the driver died (exit %s)" % rc)
        return None

    def receive(self):
        try:
            out = {}
            while True:
                line = self.p.stdout.readline()
                if not line:
                    raise BrokenPipeError
                tag, n = line.split()
                val = self.p.stdout.read(int(n))
                self.p.stdout.read(1)
                tag = tag.decode()
                if tag == "end":
                    break
                out[tag] = val
        except (BrokenPipeError, ValueError):
            rc = self.p.wait()
            self.p = None
            return Result(status=-9000 - (rc or 0), message="the driver died (exit %s)" % rc)
        return Result(status=int(out["status"]), hit=out["hit"] == b"1",
                      keyed=out["keyed"] == b"1", store_status=int(out["store_status"]),
                      message=out["message"].decode(errors="replace"), ptx=out["ptx"])

    def close(self):
        """Ends the process; returns its exit status (under ASan, a leak makes it non-zero)."""
        rc = 0
        if self.p is not None:
            if self.p.poll() is None:
                self.p.stdin.close()
            rc = self.p.wait()
        self.p = None
        return rc


class Result:
    def __init__(self, status, hit=False, keyed=True, store_status=0, message="", ptx=b""):
        self.status, self.hit, self.keyed = status, hit, keyed
        self.store_status, self.message, self.ptx = store_status, message, ptx

    def ok(self):
        return self.status == 0

    def kernel(self):
        """The PTX without comment lines: what a program runs."""
        if not self.ok():
            return None
        return b"\n".join(l.rstrip() for l in self.ptx.split(b"\n")
                          if l.strip() and not l.lstrip().startswith(b"//"))

    def constants(self):
        """What the kernel stores, o[0], o[1], ..., for messages."""
        k = self.kernel()
        if k is None:
            return "compile failed: " + self.message[:160]
        regs, out = {}, {}
        for line in k.decode(errors="replace").split("\n"):
            w = line.replace(",", " ").replace(";", " ").split()
            if len(w) == 3 and w[0].startswith("mov.") and w[1].startswith("%r"):
                regs[w[1]] = w[2]
            elif len(w) == 3 and w[0].startswith("st.global."):
                addr = w[1].strip("[]")
                off = int(addr.split("+")[1]) if "+" in addr else 0
                out[off // 4] = regs.get(w[2], w[2])
        return "o=[" + " ".join(out.get(i, "?") for i in range(max(out) + 1 if out else 0)) + "]"


# ---- a scenario's files, and edits that change identities as a real wait would --------------

def identity(path):
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def bump(path, before):
    """Makes sure path's identity differs from before (a ctime in a new clock tick)."""
    for _ in range(100):
        now = identity(path)
        if now is None or now != before:
            return
        time.sleep(0.005)
        st = os.lstat(path)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)


def apply_op(root, op, baseline=None):
    """
    Applies one edit (a tuple; see Scenario) under root. Config edits are the caller's.
    baseline: identities as kcache last saw them (before the step's first edit), so that
    a file deleted and written again within a step still gets a new identity.
    """
    baseline = {} if baseline is None else baseline
    kind = op[0]
    if kind == "set":
        return
    rel = op[1]
    path = os.path.join(root, rel)
    parent = os.path.dirname(path)
    # The directory changes too when a name comes or goes (kcache may vouch for the
    # names absent from a directory by the directory's own identity), and so does
    # the existing directory that gains the first of the directories made on the way.
    above = parent
    while not os.path.lexists(above) and os.path.dirname(above) != above:
        above = os.path.dirname(above)
    touched = [path] if kind in ("write", "same") and os.path.lexists(path) else [path, parent]
    if above != parent:
        touched.append(above)
    before = {p: baseline.setdefault(p, identity(p)) for p in touched}
    os.makedirs(parent, exist_ok=True)
    if kind in ("write", "same"):
        old = os.lstat(path) if os.path.lexists(path) and not os.path.islink(path) else None
        if os.path.islink(path):
            os.unlink(path)
        with open(path, "w") as f:
            f.write(op[2])
        if kind == "same" and old is not None:
            # Size (the caller keeps it) and mtime as they were: only ctime tells the edit.
            os.utime(path, ns=(old.st_atime_ns, old.st_mtime_ns))
    elif kind == "replace":
        tmp = path + ".kc-new"
        with open(tmp, "w") as f:
            f.write(op[2])
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        os.rename(tmp, path)
    elif kind == "rm":
        if os.path.islink(path) or os.path.isfile(path):
            os.unlink(path)
        elif os.path.isdir(path):
            shutil.rmtree(path)
    elif kind == "ln":
        if os.path.lexists(path):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        os.symlink(op[2], path)
    else:
        raise ValueError(op)
    for p in touched:
        bump(p, before[p])


def snapshot(root):
    """A digest of everything under root NVRTC could read: names, contents, link targets."""
    h = hashlib.blake2b(digest_size=16)
    for d, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for name in sorted(dirs + files):
            p = os.path.join(d, name)
            h.update(os.path.relpath(p, root).encode() + b"\0")
            if os.path.islink(p):
                h.update(b"L" + os.readlink(p).encode() + b"\0")
            elif os.path.isfile(p):
                with open(p, "rb") as f:
                    h.update(b"F" + f.read() + b"\0")
    return h.hexdigest()


# ---- what the generated files say -----------------------------------------------------------

LADDER = 10  # how many header bodies a kernel can count


def counter_ladder():
    """Counts header bodies read: each body defines the next KC_Nk (NVRTC has no __COUNTER__)."""
    out = []
    for i in range(1, LADDER + 1):
        out.append(("#if" if i == 1 else "#elif") + " !defined(KC_N%d)" % i)
        out.append("#define KC_N%d" % i)
    out.append("#endif")
    return "\n".join(out)


LADDER_TEXT = counter_ladder()


def header(fid, slot, value, pad, includes=(), guard="none", extra=""):
    """A header body: its slot's value, the counter, its id as KC_LAST, padding of pad bytes."""
    lines = []
    if guard == "once":
        lines.append("#pragma once")
    elif guard == "guard":
        lines += ["#ifndef KC_GUARD_%d" % fid, "#define KC_GUARD_%d" % fid]
    lines += list(includes)
    lines += ["#undef S%d" % slot, "#define S%d %d" % (slot, value), LADDER_TEXT,
              "#undef KC_LAST", "#define KC_LAST %d" % fid]
    if extra:
        lines.append(extra)
    lines.append("// " + "p" * pad)
    if guard == "guard":
        lines.append("#endif")
    return "\n".join(lines) + "\n"


def kernel(prelude, nslots, extra=()):
    """The source: prelude (includes and the like), then a kernel storing what they defined."""
    lines = [prelude.rstrip("\n")]
    lines.append("#if defined(KC_N%d)" % LADDER)
    lines.append("#define KC_COUNT %d" % LADDER)
    for i in range(LADDER - 1, 0, -1):
        lines += ["#elif defined(KC_N%d)" % i, "#define KC_COUNT %d" % i]
    lines += ["#else", "#define KC_COUNT 0", "#endif", "#ifndef KC_LAST", "#define KC_LAST 0",
              "#endif"]
    lines.append('extern "C" __global__ void k(int *o) {')
    for i in range(nslots):
        lines += ["#ifdef S%d" % i, "    o[%d] = S%d;" % (i, i), "#else",
                  "    o[%d] = -1;" % i, "#endif"]
    lines.append("    o[%d] = KC_COUNT;" % nslots)
    lines.append("    o[%d] = KC_LAST;" % (nslots + 1))
    for j, (expr, fallback) in enumerate(extra):
        i = nslots + 2 + j
        if fallback is None:
            lines.append("    o[%d] = %s;" % (i, expr))
        else:
            lines += ["#ifdef %s" % expr, "    o[%d] = %s;" % (i, expr), "#else",
                      "    o[%d] = %s;" % (i, fallback), "#endif"]
    lines.append("}")
    return "\n".join(lines) + "\n"


# ---- scenarios ------------------------------------------------------------------------------

class Scenario:
    """
    A tree, a compile and a list of steps, all plain data so that a replay (and a
    shell script) does exactly the same. Edits (ops):
      ("write", rel, text)    new content (new size, mostly)
      ("same", rel, text)     same size, mtime restored: only ctime tells
      ("replace", rel, text)  written beside and renamed over (a new inode)
      ("rm", rel)             deleted
      ("ln", rel, target)     a symbolic link (re)pointed
      ("set", key, value)     the compile's options: "defines", "incs", "mem"; or
                              "copy": which checkout of a tree is compiled
    cfg: source, cwd (relative to the root), incs (paths; "{R}" is the root),
    defines (-D values), mem (in-memory headers as [name, text]), paths.
    """

    def __init__(self, kind, seed, setup, cfg, steps, aged):
        self.kind, self.seed, self.setup, self.cfg = kind, seed, setup, cfg
        self.steps, self.aged = steps, aged

    def options(self, cfg, root):
        opts = ["-I" + i.replace("{R}", root) for i in cfg["incs"]]
        opts += ["-D" + d for d in cfg["defines"]]
        return opts + [o.replace("{R}", root) for o in cfg.get("extra", [])]


class Files:
    """Builds a scenario's header files with fresh values, each edit a full text."""

    def __init__(self, rng):
        self.rng = rng
        self.specs = {}   # rel -> dict(fid, slot, guard, includes, extra, value, pad)
        self.fid = 0

    def add(self, rel, slot, includes=(), guard=None, extra=""):
        self.fid += 1
        g = guard or self.rng.choice(["once", "guard", "none", "once"])
        self.specs[rel] = dict(fid=self.fid, slot=slot, guard=g, includes=list(includes),
                               extra=extra, value=self.rng.randint(100, 999),
                               pad=self.rng.randint(0, 40), crlf=self.rng.random() < 0.15)
        return ("write", rel, self.text(rel))

    def text(self, rel):
        s = self.specs[rel]
        text = header(s["fid"], s["slot"], s["value"], s["pad"], s["includes"], s["guard"],
                      s["extra"])
        return text.replace("\n", "\r\n") if s["crlf"] else text

    def edit(self, rel, how=None):
        """An edit of rel that changes its value: ("write"|"same"|"replace", rel, text)."""
        s = self.specs[rel]
        how = how or self.rng.choice(["write", "same", "same", "replace"])
        old = s["value"]
        while s["value"] == old:
            s["value"] = self.rng.randint(100, 999)
        if how != "same":
            s["pad"] = self.rng.randint(0, 40)
        return (how, rel, self.text(rel))


def gen_tree(rng):
    """Depth, twins, guards, several spellings of one file, symlinks, -I orders, -D."""
    f = Files(rng)
    setup, edits = [], []
    pool = ["a.h", "b.h", "config.h", "sub/c.h", "util.cuh"]
    dirs = ["inc1", "inc2"]
    # Files: each name in one or two of the -I directories (twins share a slot).
    where = {}
    for slot, name in enumerate(pool):
        where[name] = rng.sample(dirs, rng.choice([1, 1, 2]))

    def spell(name, from_dir):
        """An include of name from a file in from_dir: by search, or by a relative path."""
        d = rng.choice(where[name])
        choice = rng.random()
        if choice < 0.5:
            return '#include "%s"' % name if rng.random() < 0.7 else "#include <%s>" % name
        rel = os.path.relpath(os.path.join(d, name), from_dir)
        return '#include "%s"' % rel

    order = list(pool)
    rng.shuffle(order)
    for i, name in enumerate(order):
        for d in where[name]:
            rel = os.path.join(d, name)
            kids = [spell(k, os.path.dirname(rel)) for k in order[i + 1:] if rng.random() < 0.35]
            setup.append(f.add(rel, pool.index(name), kids))
    # A symlinked file beside the source, and a symlinked directory on the search path.
    link_targets = [os.path.join(d, n) for n in pool for d in where[n]]
    setup.append(("ln", "src/alias.h", os.path.join("..", rng.choice(link_targets))))
    setup.append(("ln", "incl", "inc2"))
    # -I absolute, or relative to the working directory (the source's).
    top = "{R}/" if rng.random() < 0.7 else "../"
    incs = [top + "inc1", top + rng.choice(["inc2", "incl"])]
    rng.shuffle(incs)
    later = rng.random() < 0.3
    if later:
        # A directory first on the search path that does not exist yet.
        incs.insert(0, top + "later")
    pre = ["#include \"alias.h\""]
    for name in rng.sample(pool, rng.randint(1, 3)):
        pre.append(spell(name, "src"))
    pre += ["#if SEL", spell(rng.choice(pool), "src"), "#else", spell(rng.choice(pool), "src"),
            "#endif"]
    extra = []
    if rng.random() < 0.25:
        # A header NVRTC reads with no #include: --pre-include (by search, or a path).
        setup.append(f.add("inc1/pre.h", 5))
        extra = rng.choice([["--pre-include=pre.h"], ["-include", "{R}/inc1/pre.h"]])
    if rng.random() < 0.15:
        # #include_next: the search goes on after the directory the includer was found in.
        setup.append(f.add("inc1/nx.h", 6, ["#include_next <nx.h>"]))
        setup.append(f.add("inc2/nx.h", 7))
        pre.append("#include <nx.h>")
    def source(v):
        # The source's own constant: the source is read (and memoized) like any file.
        return kernel("\n".join(pre + ["#define KC_SRC %d" % v]), len(pool) + 3,
                      [("DV", "-1"), ("KC_SRC", None)])

    setup.append(("write", "src/k.cu", source(rng.randint(100, 999))))
    cfg = dict(source="src/k.cu", cwd="src", incs=incs, defines=["SEL=1", "DV=1"], mem=[],
               extra=extra, paths=list(PATHS))
    for _ in range(rng.randint(*EDITS)):
        r = rng.random()
        rel = rng.choice(list(f.specs))
        if r < 0.45:
            edits.append([f.edit(rel)])
        elif r < 0.55:
            # Deleted, then back a step later (a missing header fails every compile).
            edits += [[("rm", rel)], [("write", rel, f.text(rel))]]
        elif r < 0.65:
            # A new file earlier on the search path (or beside the source).
            name = rng.choice(pool)
            d = rng.choice(["src", incs[0].split("/")[-1]])
            new = os.path.join(d, name)
            if new not in f.specs:
                edits.append([f.add(new, pool.index(name))])
            else:
                edits.append([f.edit(new)])
        elif r < 0.75:
            edits.append([("ln", "src/alias.h", os.path.join("..", rng.choice(link_targets)))])
        elif r < 0.85:
            edits.append([("set", "defines", ["SEL=%d" % rng.randint(0, 1),
                                              "DV=%d" % rng.randint(1, 9)])])
        elif r < 0.92:
            edits.append([("set", "incs", list(reversed(incs)))])
            incs = list(reversed(incs))
        elif r < 0.95 and rng.random() < 0.5:
            edits.append([(rng.choice(["write", "same", "replace"]), "src/k.cu",
                           source(rng.randint(100, 999)))])
        elif later and r < 0.97:
            # The missing directory comes, with a file that shadows, or goes again.
            name = rng.choice(pool)
            new = "later/" + name
            edits.append([("rm", "later")] if rng.random() < 0.3 else
                         [f.add(new, pool.index(name))] if new not in f.specs else [f.edit(new)])
        else:
            # A directory link repointed, and back a step later (its files are missed meanwhile).
            edits += [[("ln", "incl", "inc1")], [("ln", "incl", "inc2")]]
    return setup, cfg, edits


def gen_computed(rng):
    """#include MACRO: defined in a header, through another macro, or by -D NAME="x.h"."""
    f = Files(rng)
    names = ["x.h", "y.h", "z.h"]
    setup = []
    for slot, n in enumerate(names):
        for d in rng.sample(["inc1", "inc2"], rng.choice([1, 2])):
            setup.append(f.add(os.path.join(d, n), slot))

    def sel_text(target, angled):
        t = "<%s>" % target if angled else '"%s"' % target
        return "#pragma once\n#define KC_SEL_INNER %s\n#define KC_SEL KC_SEL_INNER\n" % t

    setup.append(("write", "inc1/sel.h", sel_text(rng.choice(names), rng.random() < 0.3)))
    pre = '#include "sel.h"\n#include KC_SEL\n#ifdef KC_D_HDR\n#include KC_D_HDR\n#endif\n'
    setup.append(("write", "src/k.cu", kernel(pre, len(names))))
    cfg = dict(source="src/k.cu", cwd="src", incs=["{R}/inc1", "{R}/inc2"],
               defines=['KC_D_HDR="%s"' % rng.choice(names)], mem=[], paths=list(PATHS))
    edits = []
    for _ in range(rng.randint(*EDITS)):
        r = rng.random()
        if r < 0.3:
            edits.append([("same" if rng.random() < 0.5 else "write", "inc1/sel.h",
                           sel_text(rng.choice(names), rng.random() < 0.3))])
        elif r < 0.5:
            choices = [[], ['KC_D_HDR="%s"' % rng.choice(names)],
                       ["KC_D_HDR=<%s>" % rng.choice(names)]]
            edits.append([("set", "defines", rng.choice(choices))])
        elif r < 0.6:
            rel = rng.choice(list(f.specs))
            edits += [[("rm", rel)], [("write", rel, f.text(rel))]]
        else:
            edits.append([f.edit(rng.choice(list(f.specs)))])
    return setup, cfg, edits


def gen_has_include(rng):
    """__has_include: literal, angled, and through a macro (#define HAS __has_include(...))."""
    f = Files(rng)
    pre = """#if __has_include("opt0.h")
#include "opt0.h"
#define KC_HAS0 1
#else
#define KC_HAS0 0
#endif
#define KC_HAS_OPT1 __has_include("opt1.h")
#if KC_HAS_OPT1
#define KC_HAS1 1
#else
#define KC_HAS1 0
#endif
#include "probe.h"
#if KC_HAS_OPT2
#define KC_HAS2 1
#include <opt2.h>
#else
#define KC_HAS2 0
#endif
#define KC_OPT3 "opt3.h"
#if __has_include(KC_OPT3)
#define KC_HAS3 1
#else
#define KC_HAS3 0
#endif
"""
    setup = [("write", "inc1/probe.h", "#pragma once\n#define KC_HAS_OPT2 __has_include(<opt2.h>)\n"),
             ("write", "src/k.cu", kernel(pre, 4, [("KC_HAS0", None), ("KC_HAS1", None),
                                                  ("KC_HAS2", None), ("KC_HAS3", None)]))]
    homes = ["src", "inc1", "inc2"]
    present = {}
    for slot in range(4):
        for d in homes:
            rel = "%s/opt%d.h" % (d, slot)
            op = f.add(rel, slot)
            if rng.random() < 0.3:
                setup.append(op)
                present[rel] = True
    edits = []
    for _ in range(rng.randint(*EDITS)):
        rel = rng.choice(list(f.specs))
        if present.get(rel) and rng.random() < 0.4:
            edits.append([("rm", rel)])
            present[rel] = False
        elif present.get(rel):
            edits.append([f.edit(rel)])
        else:
            edits.append([("write", rel, f.text(rel))])
            present[rel] = True
    cfg = dict(source="src/k.cu", cwd="src", incs=["{R}/inc1", "{R}/inc2"], defines=[], mem=[],
               paths=list(PATHS))
    return setup, cfg, edits


def toolkit_spelling(which):
    return [CCCL, os.path.join(TOOLKIT_REAL, "include", "cccl")][which]


def gen_shadow(rng):
    """A user -I ahead of the toolkit's holding cuda/std/version, which toolkit headers include."""
    f = Files(rng)
    setup = []
    real_version = os.path.join(os.path.realpath(CCCL), "cuda", "std", "version")
    shadow = "shadow/cuda/std/version"
    shadow_on = rng.random() < 0.7

    def shadow_text():
        s = f.specs[shadow]
        return "#pragma once\n#define SHADOW_V %d\n// %s\n#include \"%s\"\n" % (
            s["value"], "p" * s["pad"], real_version)

    f.add(shadow, 9)
    if shadow_on:
        setup.append(("write", shadow, shadow_text()))
    setup.append(("write", "src/k.cu", kernel("#include <cuda/std/cstdint>\n", 0,
                                              [("SHADOW_V", "1"),
                                               ("sizeof(cuda::std::int64_t)", None)])))
    tk = rng.randint(0, 1)
    cfg = dict(source="src/k.cu", cwd="src", incs=["{R}/shadow", toolkit_spelling(tk)],
               defines=[], mem=[], paths=list(PATHS))
    edits = []
    for _ in range(rng.randint(*EDITS)):
        r = rng.random()
        if r < 0.55:
            f.edit(shadow, "same")
            how = "same" if shadow_on and rng.random() < 0.5 else "write"
            edits.append([(how, shadow, shadow_text())])
            shadow_on = True
        elif r < 0.75:
            edits.append([("rm", shadow)])
            shadow_on = False
        else:
            tk = 1 - tk
            edits.append([("set", "incs", ["{R}/shadow", toolkit_spelling(tk)])])
    return setup, cfg, edits


def gen_tkpath(rng):
    """User files reached through the toolkit's path, and toolkit -I spelled two ways."""
    f = Files(rng)
    # "/usr/local/cuda/../../../<root>/tp/x.h" and, with -I <toolkit>/include,
    # <../../../../<root>/tp/y.h>: user files, whatever directory they pass through.
    setup = [f.add("tp/x.h", 0), f.add("tp/y.h", 1), f.add("src/z.h", 2)]
    depth = len(TOOLKIT.strip("/").split("/"))
    pre = ('#include "%s/%s{R}/tp/x.h"\n' % (TOOLKIT, "/".join([".."] * depth)) +
           "#include <%s{R}/tp/y.h>\n" % "/".join([".."] * (depth + 1)) +
           '#include "z.h"\n#include <cuda/std/cstdint>\n')
    setup.append(("write", "src/k.cu", kernel(pre, 3, [("sizeof(cuda::std::int32_t)", None)])))

    def incs(tk):
        return [os.path.join([TOOLKIT, TOOLKIT_REAL][tk], "include"), toolkit_spelling(tk)]

    tk = rng.randint(0, 1)
    cfg = dict(source="src/k.cu", cwd="src", incs=incs(tk), defines=[], mem=[],
               paths=list(PATHS))
    edits = []
    for _ in range(rng.randint(*EDITS)):
        if rng.random() < 0.2:
            tk = 1 - tk
            edits.append([("set", "incs", incs(tk))])
        else:
            edits.append([f.edit(rng.choice(list(f.specs)))])
    return setup, cfg, edits


def gen_memory(rng):
    """In-memory headers whose quoted includes NVRTC looks up beside the header's name."""
    f = Files(rng)
    setup = [f.add("work/g.h", 0), f.add("work/sub/g2.h", 1)]
    if rng.random() < 0.5:
        setup.append(f.add("src/g.h", 2))
    else:
        f.add("src/g.h", 2)

    def mem(v1, v2):
        return [["mh.h", '#pragma once\n#include "g.h"\n#define S3 %d\n' % v1],
                ["sub/mh2.h", '#pragma once\n#include "g2.h"\n#define S4 %d\n' % v2]]

    pre = '#include "mh.h"\n#include "sub/mh2.h"\n'
    setup.append(("write", "src/k.cu", kernel(pre, 6)))
    if rng.random() < 0.3:
        # A file on disk by an in-memory header's name: NVRTC takes the one in memory.
        setup.append(f.add("src/mh.h", 5))
    cfg = dict(source="src/k.cu", cwd="work", incs=[], defines=[],
               mem=mem(rng.randint(1, 9), rng.randint(1, 9)), paths=["lib", "dropin"])
    edits = []
    for _ in range(rng.randint(*EDITS)):
        r = rng.random()
        rel = rng.choice(list(f.specs))
        if r < 0.6:
            edits.append([f.edit(rel)])
        elif r < 0.75:
            edits.append([("rm", rel)])
        elif r < 0.85:
            edits.append([("write", rel, f.text(rel))])
        else:
            edits.append([("set", "mem", mem(rng.randint(1, 9), rng.randint(1, 9)))])
    return setup, cfg, edits


def gen_scanner(rng):
    """What a scanner can get wrong: digraphs, digit separators, raw strings, splices, comments."""
    f = Files(rng)
    constructs = [
        ['%:include "t0.h"'],
        # A digit separator: a scanner that takes '0 + sizeof(" for a character
        # literal sees a comment start next, and no #include until it ends.
        ["__device__ int kc_sep = 1'0 + sizeof(\"'/*\");", '#include "t1.h"',
         "__device__ int kc_sep2 = 2; // */"],
        ["__device__ inline const char *kc_raw() {", '    return R"kc(', '#include "t9.h" */ "',
         ')kc";', "}", '#include "t2.h"'],
        ["#inc\\", 'lude "t3.h"'],
        ["#include \\", '"t4.h"'],
        ['# /* a comment */ include /* another */ "t5.h" // and a line comment'],
        ['#define KC_T6 "t6.h" /* a comment', '   over two lines */', "#include KC_T6"],
        ["#if 0", "'", "#endif", '#include "t7.h"'],
        # A function-like macro in an include: kcache cannot know, so all of it uncached.
        ["#define KC_STR(x) #x", "#include KC_STR(t8.h)"],
    ]
    setup, pre = [], []
    for i, lines in enumerate(constructs):
        setup.append(f.add("src/t%d.h" % i, i, guard="once"))
        if rng.random() < (0.15 if i == 8 else 0.75):
            pre += lines
    setup.append(("write", "src/k.cu", kernel("\n".join(pre), len(constructs))))
    cfg = dict(source="src/k.cu", cwd="src", incs=[], defines=[], mem=[], paths=list(PATHS))
    edits = [[f.edit(rng.choice(list(f.specs)))] for _ in range(rng.randint(*EDITS))]
    return setup, cfg, edits


def gen_copies(rng):
    """Two checkouts of one tree (keys hold no absolute path): each must get its own kernel."""
    f = Files(rng)
    setup = []
    for c in ("a", "b"):
        setup.append(f.add(c + "/inc/h.h", 0, ['#include "sub/g.h"']))
        setup.append(f.add(c + "/inc/sub/g.h", 1))
        setup.append(("write", c + "/src/k.cu", kernel('#include "h.h"\n', 2)))
    cfg = dict(source="a/src/k.cu", cwd="a/src", incs=["{R}/a/inc"], defines=[], mem=[],
               paths=list(PATHS))
    edits = []
    for _ in range(rng.randint(*EDITS)):
        if rng.random() < 0.5:
            edits.append([("set", "copy", rng.choice(["a", "b"]))])
        else:
            edits.append([f.edit(rng.choice(list(f.specs)))])
    return setup, cfg, edits


GENERATORS = {"tree": gen_tree, "computed": gen_computed, "has_include": gen_has_include,
              "shadow": gen_shadow, "tkpath": gen_tkpath, "memory": gen_memory,
              "scanner": gen_scanner, "copies": gen_copies}
WEIGHTS = {"tree": 5, "computed": 2, "has_include": 2, "shadow": 1, "tkpath": 1, "memory": 2,
           "scanner": 1, "copies": 1}


def make_scenario(seed, kind=None, aged=None):
    rng = random.Random(seed)
    kind = kind or rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]
    setup, cfg, edits = GENERATORS[kind](rng)
    aged = rng.random() < 0.7 if aged is None else aged
    return Scenario(kind, seed, setup, cfg, edits, aged)


# ---- running a scenario ---------------------------------------------------------------------

class Runner:
    """The kcache paths and the reference, with one cache and long-lived drivers per run."""

    def __init__(self, args, work):
        self.args, self.work = args, work
        self.cache = os.path.join(work, "cache")
        self.drivers = {}
        self.ref_memo = {}
        self.counts = dict(steps=0, compiles={p: 0 for p in PATHS}, hits={p: 0 for p in PATHS},
                           uncached={}, differ=0, ref_compiles=0, cold_checks=0,
                           both_failed=0)
        self.report = os.path.join(work, "dropin-report")
        self.bad_exits = []

    def env(self, aged, dropin=False):
        env = dict(os.environ)
        for k in ("KCACHE_PATH", "KCACHE_DISABLE", "KCACHE_NVRTC_REAL", "LD_PRELOAD",
                  "KCACHE_REMOTE", "KCACHE_TEST_CLOCK_SHIFT_NS"):
            env.pop(k, None)
        env["KCACHE_DIR"] = self.cache
        env["KCACHE_COMPRESSION"] = ""
        # meson puts the drop-in's directory on LD_LIBRARY_PATH: the reference must not find it.
        shim_dir = os.path.realpath(os.path.dirname(self.args.shim))
        env["LD_LIBRARY_PATH"] = ":".join(
            d for d in env.get("LD_LIBRARY_PATH", "").split(":")
            if d and os.path.realpath(d) != shim_dir)
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"
        if aged:
            env["KCACHE_TEST_CLOCK_SHIFT_NS"] = str(SHIFT_NS)
        if dropin and " " in self.args.shim:
            # LD_PRELOAD splits on spaces and has no escape: by its file name, found
            # through LD_LIBRARY_PATH, as `kcache run` does for such a checkout.
            env["LD_LIBRARY_PATH"] = ":".join([os.path.dirname(self.args.shim)] +
                                              [d for d in env["LD_LIBRARY_PATH"].split(":") if d])
            env["LD_PRELOAD"] = os.path.basename(self.args.shim)
            env["KCACHE_NVRTC_REPORT"] = self.report
        elif dropin:
            env["LD_PRELOAD"] = self.args.shim
            env["KCACHE_NVRTC_REPORT"] = self.report
        return env

    def driver(self, which, aged):
        key = (which, aged)
        if key not in self.drivers:
            env = self.env(aged, which == "dropin")
            if which == "ref":
                # Written only if the drop-in were loaded: the reference must be NVIDIA's.
                env["KCACHE_NVRTC_REPORT"] = self.report + ".ref"
            self.drivers[key] = Driver(self.args.driver, env)
        return self.drivers[key]

    def close(self):
        for key, d in self.drivers.items():
            rc = d.close()
            if rc:
                self.bad_exits.append("the %s driver (%s files) exited %d (its stderr is above)" % (
                    key[0], "aged" if key[1] else "fresh", rc))
        self.drivers = {}

    def reference(self, sc, cfg, root):
        """
        Plain NVRTC reading the disk now, remembered by the tree's contents and the
        request. Returns a function that gives the Result: the compile runs in its own
        process meanwhile, beside kcache's.
        """
        opts = sc.options(cfg, root)
        memo_key = (snapshot(root), root, tuple(opts), cfg["cwd"], cfg["source"],
                    json.dumps(cfg["mem"]))
        if memo_key in self.ref_memo:
            return lambda: self.ref_memo[memo_key]
        self.counts["ref_compiles"] += 1
        d = self.driver("ref", False)
        early = d.send("nvrtc", os.path.join(root, cfg["cwd"]), os.path.join(root, cfg["source"]),
                       opts, cfg["mem"])

        def get():
            if memo_key not in self.ref_memo:
                self.ref_memo[memo_key] = early or d.receive()
            return self.ref_memo[memo_key]
        return get

    def cli(self, sc, cfg, root):
        out = os.path.join(self.work, "cli-out.ptx")
        if os.path.exists(out):
            os.unlink(out)
        argv = [self.args.kcache, "compile", os.path.join(root, cfg["source"]), "--arch", ARCH[0],
                "--ptx", "-o", out, "--json", "-q"]
        rest = []
        for o in sc.options(cfg, root):
            if o[:2] in ("-I", "-D"):
                argv += [o[:2], o[2:]]
            else:
                rest.append(o)
        argv += ["--"] + rest if rest else []
        p = subprocess.run(argv, cwd=os.path.join(root, cfg["cwd"]), env=self.env(sc.aged),
                           capture_output=True)
        try:
            item = json.loads(p.stdout)["items"][0]
        except (ValueError, KeyError, IndexError):
            return Result(status=-8000, message="kcache compile said: " +
                          (p.stdout + p.stderr).decode(errors="replace")[:300])
        if p.returncode not in (0, 1):  # 1: the compile failed; more: ASan, a crash
            self.bad_exits.append("kcache compile (exit %d: %s)" % (
                p.returncode, p.stderr.decode(errors="replace").strip()[-300:]))
        msg = item.get("store_message") or item.get("message") or ""
        if item["status"] != "ok":
            return Result(status=-1, message=item.get("message", ""), keyed=False)
        with open(out, "rb") as fh:
            ptx = fh.read()
        return Result(status=0, hit=item["hit"], keyed=item["outcome"] != "uncached",
                      store_status=0 if item["cached"] else 1, message=msg, ptx=ptx)

    def kcache(self, path, sc, cfg, root):
        if path == "cli":
            return self.cli(sc, cfg, root)
        mode = "lib" if path == "lib" else "nvrtc"
        return self.driver(path, sc.aged).compile(
            mode, os.path.join(root, cfg["cwd"]), os.path.join(root, cfg["source"]),
            sc.options(cfg, root), cfg["mem"])

    def cold(self, sc, cfg, root):
        self.counts["cold_checks"] += 1
        return self.driver("lib", sc.aged).compile(
            "cold", os.path.join(root, cfg["cwd"]), os.path.join(root, cfg["source"]),
            sc.options(cfg, root), cfg["mem"])

    def count_uncached(self, path, r):
        if r.ok() and (not r.keyed or r.store_status):
            reason = r.message.split("(")[0].strip()[:90] or "no reason given"
            key = "%s: %s" % (path, reason)
            self.counts["uncached"][key] = self.counts["uncached"].get(key, 0) + 1

    def run(self, sc, root, steps=None, paths=None, rng=None, real_sleep=False, log=None):
        """
        Builds sc's tree under root and runs its steps (a subset, for shrinking).
        Returns the failures, at most one per path (a path that failed is not run
        again: its cache no longer says anything); log(row) gets one row per step.
        """
        cfg = json.loads(json.dumps(sc.cfg))
        cfg["incs"] = [i.replace("{R}", root) for i in cfg["incs"]]
        steps = sc.steps if steps is None else steps
        live = [p for p in (paths or cfg["paths"]) if p in cfg["paths"]]
        failures = []
        for op in sc.setup:
            apply_op(root, fix(op, root))
        rng = rng or random.Random(sc.seed ^ 0x5eed)
        for n, step in enumerate([[]] + list(steps)):
            if not live:
                break
            baseline = {}
            for op in step:
                op = fix(op, root)
                if op[0] == "set" and op[1] == "copy":
                    cfg.update(source=op[2] + "/src/k.cu", cwd=op[2] + "/src",
                               incs=[os.path.join(root, op[2], "inc")])
                elif op[0] == "set":
                    cfg[op[1]] = [v.replace("{R}", root) if isinstance(v, str) else v
                                  for v in op[2]]
                else:
                    apply_op(root, op, baseline)
            if real_sleep:
                time.sleep(2.2)
            pending = self.reference(sc, cfg, root)
            self.counts["steps"] += 1
            now = live
            if self.args.rotate and n > 0:
                now = [live[(n + sc.seed) % len(live)]]
            got = {path: self.kcache(path, sc, cfg, root) for path in now}
            ref = pending()
            row = {"step": n, "ref": ref.constants(), "paths": {}}
            for path in list(now):
                r = got[path]
                self.counts["compiles"][path] += 1
                self.counts["hits"][path] += r.hit
                if path != "dropin":  # the drop-in's reasons come from its report
                    self.count_uncached(path, r)
                row["paths"][path] = (r.hit, r.constants())
                verdict = compare(ref, r)
                if verdict is None and path != "dropin" and r.hit and \
                        rng.random() < self.args.cold_rate:
                    # kcache against kcache: byte for byte, comments included.
                    cold = self.cold(sc, cfg, root)
                    if cold.ok() and cold.ptx != r.ptx:
                        verdict = "warm-differs-from-empty-cache"
                if verdict is None and ref.ok() and r.ok() and ref.ptx != r.ptx:
                    # Same kernel, other bytes: what the comparison leaves out (see the
                    # docstring); counted so that it stays known.
                    self.counts["raw_differs"] = self.counts.get("raw_differs", 0) + 1
                if verdict is None:
                    if not ref.ok() and not r.ok():
                        self.counts["both_failed"] += 1
                        k = "both_failed_" + sc.kind
                        self.counts[k] = self.counts.get(k, 0) + 1
                    continue
                why = verdict
                if path == "dropin" and verdict == "different-kernel":
                    # A miss is NVIDIA's NVRTC on this very disk: only a hit can differ.
                    why = "stale-hit"
                elif verdict == "different-kernel":
                    cold = self.cold(sc, cfg, root)
                    why = ("stale-hit" if r.hit else "stale") if compare(ref, cold) is None \
                        else "differs-even-uncached"
                live.remove(path)
                failures.append(dict(step=n, path=path, why=why, ref=ref.constants(),
                                     got=r.constants(), hit=r.hit, message=r.message))
            if log:
                log(row)
        return failures


def fix(op, root):
    """An op with "{R}" (the scenario's root) filled in."""
    return tuple(v.replace("{R}", root) if isinstance(v, str) else v for v in op)


def compare(ref, r):
    """None when r is what NVRTC gives; else why not."""
    if ref.ok() and r.ok():
        return None if ref.kernel() == r.kernel() else "different-kernel"
    if ref.ok():
        return "kcache-failed-where-nvrtc-passed"
    if r.ok():
        return "kernel-where-nvrtc-fails"
    return None


# ---- shrinking and repro scripts ------------------------------------------------------------

def replay(args, sc, steps, path, why):
    """Runs sc alone (fresh cache, fresh processes); the failure if it is (path, why) again."""
    work = tempfile.mkdtemp(prefix="kcache sound-replay-", dir=args.tmp)
    runner = Runner(args, work)
    try:
        root = os.path.join(work, "tree")
        os.makedirs(root)
        for f in runner.run(sc, root, steps=steps, paths=[path]):
            if f["why"] == why:
                return f
        return None
    finally:
        runner.close()
        shutil.rmtree(work, ignore_errors=True)


def ddmin(items, fails, deadline):
    """The smallest sublist (1-minimal, time permitting) for which fails() holds."""
    n = 2
    while len(items) >= 2 and time.time() < deadline:
        chunk = max(1, len(items) // n)
        subsets = [items[i:i + chunk] for i in range(0, len(items), chunk)]
        reduced = False
        for i in range(len(subsets)):
            complement = [x for j, s in enumerate(subsets) if j != i for x in s]
            if time.time() < deadline and fails(complement):
                items, n, reduced = complement, max(n - 1, 2), True
                break
        if not reduced:
            if n >= len(items):
                break
            n = min(len(items), 2 * n)
    return items


def shrink(args, sc, failure, deadline):
    """
    The fewest steps (each step's ops kept whole, then single ops), then the fewest
    files of the tree, that still fail the same way. Returns (scenario, steps), or
    None when the failure does not happen alone.
    """
    path, why = failure["path"], failure["why"]
    steps = [list(s) for s in sc.steps[:failure["step"]]]
    if not replay(args, sc, steps, path, why):
        return None
    steps = ddmin(steps, lambda s: replay(args, sc, s, path, why) is not None, deadline)
    ops = [[op] for s in steps for op in s]
    if len(ops) > len(steps):
        ops = ddmin(ops, lambda s: replay(args, sc, s, path, why) is not None, deadline)
        steps = ops
    # The tree: every file but the sources may go (costly: the long mode's).
    optional = [i for i, op in enumerate(sc.setup) if not op[1].endswith(".cu")]
    if not args.shrink_files:
        return sc, steps

    def with_files(keep):
        return Scenario(sc.kind, sc.seed, [op for i, op in enumerate(sc.setup)
                                           if i not in optional or i in keep],
                        sc.cfg, sc.steps, sc.aged)
    keep = ddmin(optional, lambda k: replay(args, with_files(k), steps, path, why) is not None,
                 deadline)
    return with_files(keep), steps


SCRIPT_HEAD = r'''#!/bin/bash
# A repro from tests/soundness/harness.py: rebuilds the tree, applies each step's
# edits, and after each step compares kcache's result with NVIDIA's NVRTC
# reading the disk (soundness-driver's "nvrtc" mode, run without the drop-in).
# KCACHE, DRIVER and SHIM may be set to another build's.
# Exits 1 when a result differs, as the harness saw it.
set -u
export LC_ALL=C
KCACHE=${KCACHE:-%(kcache)s}
DRIVER=${DRIVER:-%(driver)s}
SHIM=${SHIM:-%(shim)s}
HERE=$(cd "$(dirname "$0")" && pwd)
R=$(mktemp -d "${TMPDIR:-/tmp}/kcache repro-XXXXXX")
export KCACHE_DIR="$R/.cache"
unset KCACHE_DISABLE KCACHE_REMOTE LD_PRELOAD KCACHE_NVRTC_REAL
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:verify_asan_link_order=0"
%(aged)s
mkdir -p "$R"
DIFFERS=0
# field TAG VALUE: one field of soundness-driver's wire format.
field() { printf '%%s %%d\n%%s\n' "$1" "${#2}" "$2"; }
# request MODE CWD SOURCE [OPTIONS...]; in-memory headers come from MEM_NAMES/MEM_FILES.
request() {
    local mode=$1 cwd=$2 src=$3; shift 3
    field mode "$mode"; field arch %(arch)s; field cwd "$cwd"; field path "$src"
    local o; for o in "$@"; do field opt "$o"; done
    local i; for i in "${!MEM_NAMES[@]}"; do
        local t; t=$(cat "${MEM_FILES[$i]}"; printf x)
        field hname "${MEM_NAMES[$i]}"; field htext "${t%%x}"
    done
    field go ""
}
# answer: reads one answer from the driver on fd $1; the kernel (PTX without
# comment lines) goes to file $2, "failed" if it did not compile.
answer() {
    local tag n val status=
    while read -r tag n <&"$1"; do
        IFS= read -r -d '' -N "$((n + 1))" val <&"$1"
        case $tag in
            status) status=${val%%?} ;;
            ptx) if [ "$status" = 0 ]; then printf '%%s' "${val%%?}" | grep -v '^[[:space:]]*//' | grep -v '^\s*$' > "$2"
                 else echo failed > "$2"; fi ;;
            end) return 0 ;;
        esac
    done
    echo "driver died" > "$2"
}
MEM_NAMES=(); MEM_FILES=()
%(coproc)s
check() { # check STEP: NVRTC now against kcache's path
    local step=$1; shift
    request nvrtc "$CWD" "$SRC" "${OPTS[@]}" | env -u LD_PRELOAD "$DRIVER" > "$R/.ref.answer"
    answer 3 "$R/.ref.$step" 3< "$R/.ref.answer"
    %(check)s
    if ! cmp -s "$R/.ref.$step" "$R/.got.$step"; then
        echo "step $step: DIFFERS from NVRTC"; diff "$R/.ref.$step" "$R/.got.$step" | head -20
        DIFFERS=1
    else
        echo "step $step: same as NVRTC"
    fi
}
'''

CHECK = {
    "cli": r'''rm -f "$R/.out.ptx"
    local args=() rest=() o
    for o in "${OPTS[@]}"; do
        case $o in -I*|-D*) args+=("${o:0:2}" "${o:2}") ;; *) rest+=("$o") ;; esac
    done
    [ ${#rest[@]} -gt 0 ] && args+=(-- "${rest[@]}")
    (cd "$CWD" && "$KCACHE" compile "$SRC" --arch %(arch)s --ptx -o "$R/.out.ptx" "${args[@]}" >/dev/null 2>"$R/.err") || true
    if [ -s "$R/.out.ptx" ]; then grep -v '^[[:space:]]*//' "$R/.out.ptx" | grep -v '^\s*$' > "$R/.got.$step"; else echo failed > "$R/.got.$step"; fi
    echo "  kcache compile: $(cat "$R/.err" | head -1)"''',
    "lib": r'''request lib "$CWD" "$SRC" "${OPTS[@]}" >&"${KC[1]}"
    answer "${KC[0]}" "$R/.got.$step"''',
    "dropin": r'''request nvrtc "$CWD" "$SRC" "${OPTS[@]}" >&"${KC[1]}"
    answer "${KC[0]}" "$R/.got.$step"''',
}

COPROC = {
    "cli": "",
    "lib": 'coproc KC { "$DRIVER"; }',
    "dropin": 'coproc KC { LD_PRELOAD="$SHIM" "$DRIVER"; }',
}


def shell_op(op):
    kind = op[0]
    q = lambda s: shlex.quote(s)  # noqa: E731
    rel = op[1]
    p = '"$R"/' + q(rel)
    d = '"$R"/' + q(os.path.dirname(rel) or ".")
    if kind == "set":
        if rel == "mem":
            lines = ["MEM_NAMES=(); MEM_FILES=()"]
            for i, (name, text) in enumerate(op[2]):
                f = '"$R"/.mem%d' % i
                lines.append("cat > %s <<'KC_EOF'\n%sKC_EOF" % (f, text))
                lines.append("MEM_NAMES+=(%s); MEM_FILES+=(%s)" % (q(name), f))
            return "\n".join(lines)
        if rel == "copy":
            return 'CWD="$R"/%s/src; SRC="$R"/%s/src/k.cu; INCS=("$R"/%s/inc)' % (
                op[2], op[2], op[2])
        if rel == "incs":
            return "INCS=(%s)" % " ".join('"%s"' % i.replace("{R}", "$R") for i in op[2])
        return "DEFS=(%s)" % " ".join(q(x) for x in op[2])
    if kind in ("write", "replace", "same"):
        out = ["mkdir -p %s" % d]
        target = p + (".new" if kind == "replace" else "")
        if kind == "same":
            out.append("[ -f %s ] && touch -r %s \"$R/.stamp\"" % (p, p))
        out.append("[ -L %s ] && rm -f %s" % (p, p))
        out.append("sed \"s|@R@|$R|g\" > %s <<'KC_EOF'\n%sKC_EOF" % (target, op[2].replace("{R}", "@R@")))
        if kind == "replace":
            out.append("mv %s %s" % (target, p))
        if kind == "same":
            out.append("[ -f \"$R/.stamp\" ] && touch -m -r \"$R/.stamp\" %s; rm -f \"$R/.stamp\""
                       % p)
        out.append("sleep 0.01  # a new ctime tick for every edit")
        return "\n".join(out)
    if kind == "rm":
        return "rm -rf %s; sleep 0.01" % p
    if kind == "ln":
        return "mkdir -p %s; rm -rf %s; ln -s %s %s; sleep 0.01" % (d, p, q(op[2]), p)
    raise ValueError(op)


def write_repro(args, sc, steps, failure, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    path = failure["path"]
    aged = ('export KCACHE_TEST_CLOCK_SHIFT_NS=%d  # every file looks 10 s old to kcache'
            % SHIFT_NS) if sc.aged else "unset KCACHE_TEST_CLOCK_SHIFT_NS"
    text = SCRIPT_HEAD % dict(kcache=shlex.quote(os.path.abspath(args.kcache)),
                              driver=shlex.quote(os.path.abspath(args.driver)),
                              shim=shlex.quote(os.path.abspath(args.shim)), aged=aged,
                              coproc=COPROC[path], arch=ARCH[0],
                              check=CHECK[path] % dict(arch=ARCH[0]))
    cfg = sc.cfg
    lines = ["# scenario %s, seed %d, %s files; the failure: %s on the %s path at step %d"
             % (sc.kind, sc.seed, "aged" if sc.aged else "fresh", failure["why"], path,
                len(steps)),
             "# The tree."]
    lines += [shell_op(op) for op in sc.setup]
    lines.append(shell_op(("set", "incs", cfg["incs"])))
    lines.append(shell_op(("set", "defines", cfg["defines"])))
    if cfg["mem"]:
        lines.append(shell_op(("set", "mem", cfg["mem"])))
    lines.append('CWD="$R"/%s; SRC="$R"/%s' % (shlex.quote(cfg["cwd"]),
                                               shlex.quote(cfg["source"])))
    lines.append("EXTRA=(%s)" % " ".join('"%s"' % o.replace("{R}", "$R")
                                          for o in cfg.get("extra", [])))
    lines.append('opts() { OPTS=(); local i d; for i in "${INCS[@]}"; do OPTS+=("-I$i"); done;'
                 ' for d in "${DEFS[@]}"; do OPTS+=("-D$d"); done; OPTS+=("${EXTRA[@]}"); }')
    lines.append("opts; check 0")
    for n, step in enumerate(steps, 1):
        lines.append("# Step %d." % n)
        lines += [shell_op(op) for op in step]
        lines.append("opts; check %d" % n)
    lines.append('rm -rf "$R"')
    lines.append("exit $DIFFERS")
    script = os.path.join(out_dir, "repro.sh")
    with open(script, "w") as f:
        f.write(text + "\n".join(lines) + "\n")
    os.chmod(script, 0o755)
    return script


# ---- the run --------------------------------------------------------------------------------

def nvrtc_present(args):
    tmp = tempfile.mkdtemp(prefix="kcache sound-probe-", dir=args.tmp)
    d = Runner(args, tmp).driver("ref", False)
    try:
        with open(os.path.join(tmp, "k.cu"), "w") as f:
            f.write('extern "C" __global__ void k(int *o) { o[0] = 1; }\n')
        r = d.compile("nvrtc", tmp, os.path.join(tmp, "k.cu"), [], [])
        return r.ok(), r.message
    finally:
        d.close()
        shutil.rmtree(tmp, ignore_errors=True)


def dropin_report(path):
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                w = line.split()
                rows.append({w[i]: w[i + 1] for i in range(0, len(w) - 1, 2)})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kcache", required=True)
    ap.add_argument("--driver", required=True)
    ap.add_argument("--shim", required=True)
    ap.add_argument("--seed", type=int, default=None, help="the run's seed (default: random)")
    ap.add_argument("--scenarios", type=int, default=None, help="how many scenarios")
    ap.add_argument("--kind", choices=sorted(GENERATORS), help="only scenarios of this kind")
    ap.add_argument("--scenario", metavar="KIND:SEED[:aged|fresh]",
                    help="run this one scenario (as a DIFFERS line names it), all its steps")
    ap.add_argument("--steps", type=int, default=None,
                    help="run until this many steps are done, however long it takes")
    ap.add_argument("--long", action="store_true", help="run for --minutes (default 30)")
    ap.add_argument("--minutes", type=float, default=None)
    ap.add_argument("--seconds", type=float, default=None, help="time budget (default mode: 55)")
    ap.add_argument("--rotate", action="store_true", default=None,
                    help="after a scenario's first step, one path per step in turn (default "
                         "in the long mode; otherwise every path every step)")
    ap.add_argument("--all-paths", dest="rotate", action="store_false",
                    help="every path every step, in the long mode too")
    ap.add_argument("--cold-rate", type=float, default=0.1,
                    help="share of hits also compared with an empty cache's result")
    ap.add_argument("--real-sleep", type=int, default=None, metavar="N",
                    help="also run N scenarios with real 2.2 s waits and compare the outcomes")
    ap.add_argument("--shrink-seconds", type=float, default=None,
                    help="time for shrinking all failures (default 25, long mode 300)")
    ap.add_argument("--arch", default="compute_90",
                    help="the target (default compute_90: PTX without ptxas, the cheapest "
                         "compile; sm_90 also runs ptxas, and the drop-in keeps a CUBIN and "
                         "its PTX)")
    ap.add_argument("--files", choices=["mixed", "aged", "fresh"], default="mixed",
                    help="aged: every file past the trust window (the clock moved); fresh: "
                         "none; mixed (default): 70%% of scenarios aged")
    ap.add_argument("--shrink-files", action="store_true", default=None,
                    help="shrink the tree's files too, not only the steps (default in the "
                         "long mode)")
    ap.add_argument("--keep", default=os.environ.get("SOUNDNESS_KEEP"),
                    help="directory for repro scripts (default: $SOUNDNESS_KEEP, else a new "
                         "temporary directory)")
    ap.add_argument("--tmp", default=None, help="where trees go (default: TMPDIR)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    if args.scenario:
        args.scenarios = 1
    ARCH[0] = args.arch
    if args.rotate is None:
        args.rotate = args.long
    if args.shrink_files is None:
        args.shrink_files = args.long
    if args.long:
        EDITS[:] = [10, 30]
    args.kcache, args.driver, args.shim = (os.path.abspath(p) for p in
                                           (args.kcache, args.driver, args.shim))

    ok, why = nvrtc_present(args)
    if not ok:
        print("SKIP: NVIDIA's NVRTC cannot compile here (%s)" % why)
        return 77
    seed = args.seed if args.seed is not None else random.SystemRandom().randint(1, 2**31)
    budget = (args.seconds if args.seconds is not None else
              (args.minutes or 30) * 60 if args.long else
              args.minutes * 60 if args.minutes else 55)
    shrink_budget = args.shrink_seconds if args.shrink_seconds is not None else \
        (300 if args.long else 25)
    real_sleep = args.real_sleep if args.real_sleep is not None else (0 if args.long else 1)
    keep = args.keep or tempfile.mkdtemp(prefix="kcache-soundness-repro-")
    os.makedirs(keep, exist_ok=True)
    print("soundness: seed %d (rerun: --seed %d), budget %.0f s" % (seed, seed, budget))
    sys.stdout.flush()
    t0 = time.time()
    work = tempfile.mkdtemp(prefix="kcache sound-", dir=args.tmp)
    runner = Runner(args, work)
    rng = random.Random(seed)
    failures = []
    seen = set()
    n = 0
    try:
        while (args.scenarios is None or n < args.scenarios) and \
                (args.scenarios is not None or
                 (runner.counts["steps"] < args.steps if args.steps else
                  time.time() - t0 < budget)):
            sc_seed = rng.randint(1, 2**31)
            kind, aged = args.kind, None if args.files == "mixed" else args.files == "aged"
            if args.scenario:
                kind, sc_seed, how = (args.scenario.split(":") + ["aged"])[:3]
                sc_seed, aged = int(sc_seed), how == "aged"
            sc = make_scenario(sc_seed, kind, aged)
            root = os.path.join(work, "t%d" % n)
            os.makedirs(root)
            n += 1
            log = (lambda row: print("   ", json.dumps(row))) if args.verbose else None
            if args.verbose:
                print("scenario %d: %s seed %d %s" % (n, sc.kind, sc_seed,
                                                     "aged" if sc.aged else "fresh"))
            found = runner.run(sc, root, log=log)
            shutil.rmtree(root, ignore_errors=True)
            for f in found:
                runner.counts["differ"] += 1
                f.update(kind=sc.kind, seed=sc_seed, aged=sc.aged)
                print("DIFFERS: scenario %s:%d:%s, step %d, %s path: %s; NVRTC %s, "
                      "kcache %s%s" % (sc.kind, sc_seed, "aged" if sc.aged else "fresh",
                                       f["step"], f["path"], f["why"], f["ref"], f["got"],
                                       " (" + f["message"][:160] + ")" if f["message"] else ""))
                failures.append((sc, f))
            sys.stdout.flush()
        main_elapsed = time.time() - t0
        # The shortcut (a moved clock) against real waits: the same outcome, step by step.
        sleep_mismatch = 0
        for i in range(real_sleep):
            sc = make_scenario(rng.randint(1, 2**31), rng.choice(["tree", "computed", "copies"]),
                               aged=True)
            sc.steps = sc.steps[:4]
            outcomes = []
            for real in (False, True):
                w = tempfile.mkdtemp(prefix="kcache sound-sleep-", dir=args.tmp)
                r2 = Runner(args, w)
                rows = []
                try:
                    root = os.path.join(w, "tree")
                    os.makedirs(root)
                    if real:
                        sc.aged = False
                    r2.run(sc, root, real_sleep=real, log=rows.append)
                finally:
                    r2.close()
                    runner.bad_exits += r2.bad_exits
                    shutil.rmtree(w, ignore_errors=True)
                    sc.aged = True
                # The two trees live in different directories: outcomes name neither.
                outcomes.append(json.loads(json.dumps(
                    [(r["step"], r["ref"], sorted(r["paths"].items())) for r in rows])
                    .replace(json.dumps(root)[1:-1], "{R}")))
            same = outcomes[0] == outcomes[1]
            sleep_mismatch += not same
            print("real waits against the moved clock (%s seed %d, %d steps): %s"
                  % (sc.kind, sc.seed, len(outcomes[0]), "same outcomes" if same else
                     "DIFFERENT outcomes:\n  shifted %s\n  waited  %s" % tuple(outcomes)))
    finally:
        runner.close()
    elapsed = time.time() - t0
    # Shrink each kind of failure once, in a fresh cache with fresh processes.
    deadline = time.time() + shrink_budget
    # One of each kind first: when time runs short, every kind has had its turn.
    order = sorted(range(len(failures)), key=lambda i: (
        sum(1 for sc, f in failures[:i] if sc.kind == failures[i][0].kind), i))
    for sc, f in (failures[i] for i in order):
        sig = (sc.kind, f["path"], f["why"])
        if sig in seen:
            continue
        seen.add(sig)
        shrunk = shrink(args, sc, f, deadline) if time.time() < deadline else False
        what = "minimal repro"
        if shrunk is False:
            what = "repro (not shrunk: no time left, see --shrink-seconds)"
            steps = sc.steps[:f["step"]]
        elif shrunk is None:
            what = ("repro (not shrunk: it does not fail alone, it needs entries other "
                    "scenarios left in the cache)")
            steps = sc.steps[:f["step"]]
        else:
            sc, steps = shrunk
        script = write_repro(args, sc, steps, f, os.path.join(
            keep, "%s-%s-%s-%d" % (sc.kind, f["path"], f["why"], sc.seed)))
        print("  %s (%d files, %d steps, %d edits) for %s on the %s path (%s, seed %d): %s"
              % (what, len(sc.setup), len(steps), sum(len(s) for s in steps), f["why"],
                 f["path"], sc.kind, sc.seed, script))
    c = runner.counts
    print("soundness: %d scenarios, %d steps in %.1f s, %.1f steps/s (seed %d, %s); %.1f s "
          "in all" % (n, c["steps"], main_elapsed,
                                   c["steps"] / max(main_elapsed, 1e-9), seed, ARCH[0], elapsed))
    print("  compiles per path: %s; hits: cli %d, lib %d; NVRTC reference compiles %d; "
          "empty-cache checks %d" % (c["compiles"], c["hits"]["cli"], c["hits"]["lib"],
                                     c["ref_compiles"], c["cold_checks"]))
    if os.path.exists(runner.report + ".ref"):
        print("FAIL: the reference NVRTC was the drop-in (LD_LIBRARY_PATH?): nothing above holds")
        return 1
    print("  results that differed from NVRTC: %d" % c["differ"])
    print("  same kernel as NVRTC's but other bytes (comment lines): %d"
          % c.get("raw_differs", 0))
    by_class = {}
    for sc, f in failures:
        sig = "%-11s %-6s %-6s %s" % (sc.kind, f["path"], "aged" if sc.aged else "fresh",
                                      f["why"])
        by_class[sig] = by_class.get(sig, 0) + 1
    for sig, v in sorted(by_class.items()):
        print("    %5d  %s" % (v, sig))
    print("  both failed to compile (agreeing): %d (%s)" % (
        c["both_failed"], ", ".join("%s %d" % (k[12:], v) for k, v in sorted(c.items())
                                    if k.startswith("both_failed_"))))
    uncached = dict(c["uncached"])
    dropin = {"hits": 0, "misses": 0}
    for row in dropin_report(runner.report):
        for k, v in row.items():
            if k in dropin:
                dropin[k] += int(v)
            elif k not in ("pid", "nvrtc-loaded"):
                key = "dropin: " + k
                uncached[key] = uncached.get(key, 0) + int(v)
    print("  drop-in (its report): %d hits, %d misses" % (dropin["hits"], dropin["misses"]))
    print("  compiled uncached, by reason: %s" % (
        "none" if not uncached else ""))
    for k, v in sorted(uncached.items(), key=lambda kv: -kv[1]):
        print("    %5d  %s" % (v, k))
    if args.real_sleep or real_sleep:
        print("  real waits that changed an outcome: %d" % sleep_mismatch)
    for what in runner.bad_exits:
        print("FAIL: %s" % what)
    if failures:
        print("  repro scripts under %s" % keep)
    shutil.rmtree(work, ignore_errors=True)
    return 1 if failures or sleep_mismatch or runner.bad_exits else 0


if __name__ == "__main__":
    sys.exit(main())

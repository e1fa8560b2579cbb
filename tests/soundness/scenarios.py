"""The soundness harness's scenarios: a header tree, a compile and its edit steps.

What the generated files say (each kernel takes its output values from the
headers it read, so a stale header shows as a different constant), the kinds
of tree (GENERATORS), and the edits, each made to change the file's identity
as a real wait would. Imported by harness.py; nothing here runs a compiler.
"""
import hashlib
import os
import random
import shutil
import time

TOOLKIT = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
TOOLKIT_REAL = os.path.realpath(TOOLKIT)
CCCL = os.path.join(TOOLKIT, "include", "cccl")
SHIFT_NS = 10_000_000_000  # every file 10 s old to kcache's trust rule
ARCH = ["compute_90"]      # PTX without ptxas: the cheapest compile that shows a header
PATHS = ("cli", "lib", "dropin")
EDITS = [4, 10]            # edits per scenario (the long mode makes scenarios longer)


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
    # A generated edit can name a folder where an earlier one left a file or a
    # link that is no folder ("inc" a file, then "inc/a.h"): no tool could make
    # that edit, so it is not made (it once stopped the harness with FileExistsError).
    at = parent
    while at != root and at.startswith(root + os.sep):
        if os.path.lexists(at) and not os.path.isdir(at):
            return
        at = os.path.dirname(at)
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
      ("set", key, value)     the compile's options: "defines", "incs", "mem", "extra";
                              "env" (a dict), "kind", "name"; or "copy": which
                              checkout of a tree is compiled
    cfg: source, cwd (relative to the root), incs (paths; "{R}" is the root),
    defines (-D values), mem (in-memory headers as [name, text]), paths; and
    optionally extra (more options), env (variables NVRTC reads, set for every
    process of the compile, the reference's too), kind (ptx, cubin, ltoir), arch
    ("-": none but the options'), name (the program's name) and root ("shm":
    the tree is made under /dev/shm).
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

    def step(self, rel, present, remove):
        """The next edit of rel, present the set of files there now: rel removed
        (when remove), else edited where it is there, else written anew."""
        if rel in present and remove:
            present.discard(rel)
            return ("rm", rel)
        if rel in present:
            return self.edit(rel)
        present.add(rel)
        return ("write", rel, self.text(rel))


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


def gen_runtime(rng):
    """<cuda_runtime.h>: crt/'s "host_defines.h" and others handed over by spelling.

    crt/ holds names that include/ holds too (math_functions.h, host_defines.h,
    ...), which its headers find beside them (lib/resolve/hermetic.c); a user
    directory ahead of the toolkit's may hold one of them, and the source may
    look one up itself, where the name handed over would change the answer.
    """
    f = Files(rng)
    names = ["math_functions.h", "host_defines.h", "device_functions.h", "kc_none.h"]
    name = rng.choice(names)
    shadow = "u/" + name
    f.add(shadow, 0)
    on = rng.random() < 0.5
    setup = [f.add("u/x.h", 1)]
    if on:
        setup.append(("write", shadow, f.text(shadow)))
    pre = ("#ifdef KC_RT\n#include <cuda_runtime.h>\n#endif\n#include \"x.h\"\n"
           "#if defined(KC_ASK) && __has_include(<%s>)\n#include <%s>\n#endif\n" % (name, name))
    setup.append(("write", "src/k.cu", kernel(pre, 2, [("sizeof(float2)", None)])))
    defines = ["KC_RT"] + (["KC_ASK"] if rng.random() < 0.5 else [])
    incs = ["{R}/u", os.path.join(TOOLKIT, "include")]
    cfg = dict(source="src/k.cu", cwd="src", incs=incs, defines=defines, mem=[],
               paths=list(PATHS))
    edits = []
    for _ in range(rng.randint(*EDITS)):
        r = rng.random()
        if r < 0.3:
            edits.append([("rm", shadow)] if on else [f.edit(shadow, "write")])
            on = not on
        elif r < 0.5:
            defines = ["KC_RT"] + ([] if "KC_ASK" in defines else ["KC_ASK"])
            edits.append([("set", "defines", list(defines))])
        elif r < 0.6:
            incs = incs[::-1]
            edits.append([("set", "incs", list(incs))])
        else:
            edits.append([f.edit(rng.choice(["u/x.h", shadow] if on else ["u/x.h"]))])
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
              "scanner": gen_scanner, "copies": gen_copies, "runtime": gen_runtime}
WEIGHTS = {"tree": 5, "computed": 2, "has_include": 2, "shadow": 1, "tkpath": 1, "memory": 2,
           "scanner": 1, "copies": 1, "runtime": 1}


def make_scenario(seed, kind=None, aged=None):
    rng = random.Random(seed)
    kind = kind or rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]
    setup, cfg, edits = GENERATORS[kind](rng)
    aged = rng.random() < 0.7 if aged is None else aged
    return Scenario(kind, seed, setup, cfg, edits, aged)


# ---- the classes of issue 32: options, environment, -D values, system paths, names -----------

# NVRTC 13's options as programs spell them, each entry one option's arguments;
# which NVRTC 13.0 accepts was measured by running each alone through it (the
# harness compares verdicts, so the lists only steer what is generated). -I,
# -D, -U and -include have generators of their own; -arch is gen_arch's;
# options that write files (-time, -pch, -fdevice-time-trace) are left out.
NVRTC_OPTIONS = [
    ["-G"], ["--device-debug"], ["-lineinfo"], ["--generate-line-info"], ["-dopt=on"],
    ["-dopt", "on"], ["--maxrregcount=32"], ["-maxrregcount=64"], ["-maxrregcount", "32"],
    ["--maxrregcount", "40"], ["-ftz=true"], ["--ftz=false"], ["-ftz", "true"],
    ["-prec-sqrt=false"], ["--prec-div=false"], ["-fmad=false"], ["--fmad=true"],
    ["-use_fast_math"], ["--use_fast_math"], ["-extra-device-vectorization"],
    ["-modify-stack-limit=false"], ["-rdc=true"], ["--relocatable-device-code=false"], ["-dc"],
    ["--device-c"], ["-dw"], ["-ewp"], ["-std=c++17"], ["--std=c++20"], ["-std=c++11"],
    ["-builtin-move-forward=false"], ["-builtin-initializer-list=false"], ["-w"],
    ["--disable-warnings"], ["-restrict"], ["-default-device"], ["-device-int128"], ["-err-no"],
    ["-no-err-no"], ["-diag-suppress=177"], ["--diag-suppress", "177"], ["-diag-warn=177"],
    ["-brief-diag=true"], ["-frandom-seed=5"], ["--frandom-seed=7"], ["-jtd=50"],
    ["--jump-table-density=50"], ["-device-stack-protector=true"], ["-split-compile=2"],
    ["-minimal"], ["-fdevice-syntax-only"], ["-Xptxas=-O2"], ["--ptxas-options=-O2"],
    ["-Xptxas", "-O1"], ["--no-cache"], ["-no-cache"], ["--include-path={R}/inc2"],
    ["--define-macro=KC_OPT_D=3"], ["--define-macro", "KC_OPT_D=4"], ["-D", "KC_OPT_D=5"],
    ["--undefine-macro=KC_OPT_D"], ["-U", "KC_OPT_D"],
]
# Spellings NVRTC 13 refuses (long names take two dashes; these take no separate value).
NVRTC_REJECTED = [
    ["-device-debug"], ["-generate-line-info"], ["-include-path={R}/inc2"], ["-std", "c++17"],
    ["--std", "c++17"], ["--frandom-seed", "5"], ["-frandom-seed", "5"], ["-use-fast-math"],
    ["-define-macro=KC_OPT_D=3"], ["-undefine-macro=KC_OPT_D"], ["--dopt=off"], ["-O3"],
    ["-Ofast-compile=max"], ["--expt-relaxed-constexpr"], ["-Wreorder"],
]
# What NVRTC 13.0 asks getenv for while it loads and compiles (an interposed
# getenv listed them), with values to set; those that write files are left out.
NVRTC_ENV = {
    "LLVM_OVERRIDE_PRODUCER": ["kc-producer-1", "LLVM7.0.1"],
    "NVRTC_APPEND_FLAGS": ["-DKC_ENV_D=7", "-lineinfo"],
    "NVVM_IR_VER_CHK": ["0", "1"],
    "NVRTC_DISABLE_PCH": ["1"],
    "NVRTC_PCH_HEAP_SIZE": ["1"],
    "CUDA_CACHE_DISABLE": ["1", "0"],
    "NV_NVVM_VERSION": ["2.0", "9.9"],
    "NVRTC_DISABLE_CONCURRENT_NVVM": ["1"],
    "LIBNVVM_DISABLE_CONCURRENT_API": ["1"],
    "NVRTC_INTERNAL_GLOBAL_LOCK": ["1"],
    "CAN_FINALIZE_DEBUG": ["1"],
    "NVRTCWIZ": ["1"],
    "EDG_BASE": ["/nonexistent"],
    "EDG_MODULES_PATH": ["/nonexistent"],
}
ARCH_LISTS = [
    ["-arch=sm_90", "-arch=compute_90"], ["-arch=compute_90", "-arch=sm_90"],
    ["--gpu-architecture=sm_90", "-arch", "compute_90"], ["-arch", "sm_90", "-arch=sm_80"],
    ["-arch=sm_80", "--gpu-architecture", "compute_90", "-arch=sm_90"], ["-arch=sm_90"],
]


def simple_tree(rng, f, incs=("inc1",)):
    """Two headers found through -I and a source that stores their values."""
    setup = [f.add(incs[0] + "/a.h", 0), f.add(incs[-1] + "/b.h", 1)]
    setup.append(("write", "src/k.cu", kernel('#include "a.h"\n#include <b.h>\n', 2,
                                              [("KC_OPT_D", "-1"), ("KC_ENV_D", "-1")])))
    return setup


def option_list(rng):
    opts = [o for o in rng.sample(NVRTC_OPTIONS, rng.randint(1, 3))]
    if rng.random() < 0.35:
        opts.append(rng.choice(NVRTC_REJECTED))
    if rng.random() < 0.35:
        opts.append(rng.choice(opts))  # a repeat: first or last wins, or both count
    rng.shuffle(opts)
    return [a for o in opts for a in o]


def gen_options(rng):
    """Option lists drawn from NVRTC's own, with repeats and spellings it refuses.

    -G and -lineinfo put the program's name in the PTX: named as kcache compile
    names a file (its base name), as gen_env's programs are.
    """
    f = Files(rng)
    setup = simple_tree(rng, f, ("inc1", "inc2"))
    cfg = dict(source="src/k.cu", cwd="src", incs=["{R}/inc1", "{R}/inc2"], defines=[], mem=[],
               extra=option_list(rng), optclass=True, name="k.cu", paths=list(PATHS))
    edits = []
    for _ in range(rng.randint(*EDITS)):
        if rng.random() < 0.5:
            edits.append([("set", "extra", option_list(rng))])
        else:
            edits.append([f.edit(rng.choice(list(f.specs)))])
    return setup, cfg, edits


def env_choice(rng):
    names = rng.sample(sorted(NVRTC_ENV), rng.randint(0, 2))
    if rng.random() < 0.4:
        names.append("LLVM_OVERRIDE_PRODUCER")
    return {n: rng.choice(NVRTC_ENV[n]) for n in names}


def gen_env(rng):
    """Environment variables NVRTC reads, LLVM_OVERRIDE_PRODUCER with -dlto (LTO-IR).

    An LTO-IR or a CUBIN holds the program's name: these programs are named as
    kcache compile and the library name them when given none (the base name).
    """
    f = Files(rng)
    setup = simple_tree(rng, f)
    ltoir = rng.random() < 0.6
    cfg = dict(source="src/k.cu", cwd="src", incs=["{R}/inc1"], defines=[], mem=[],
               extra=["-dlto"] if ltoir else [], env=env_choice(rng),
               kind="ltoir" if ltoir else "ptx", name="k.cu", paths=list(PATHS))
    edits = []
    for _ in range(rng.randint(*EDITS)):
        if rng.random() < 0.6:
            edits.append([("set", "env", env_choice(rng))])
        else:
            edits.append([f.edit(rng.choice(list(f.specs)))])
    return setup, cfg, edits


def dvalue_defines(rng, refused=False):
    name = rng.choice(["opt4.h", "opt5.h"])
    has = rng.choice(['KC_DHAS=__has_include("%s")', "KC_DHAS=__has_include(<%s>)",
                      'KC_DHAS=__has_include( "%s" )']) % name
    fn = rng.choice(["KC_DHASF(x)=__has_include(x)", "KC_DHASF( x )=KC_DHASW(x)"])
    if refused:
        fn = "KC_DHASF(x) =__has_include(x)"  # NVRTC: "invalid macro definition"
    return [has, fn, "KC_DHASW(y)=__has_include(y)"]


def gen_dvalue(rng, root_kind=None):
    """__has_include in -D values, expanded in the source and in a header elsewhere."""
    f = Files(rng)
    pre = ('#include "sub/use.h"\n#if KC_DHAS\n#define KC_H0 1\n#else\n#define KC_H0 0\n#endif\n'
           '#if KC_DHASF("opt5.h")\n#define KC_H1 1\n#else\n#define KC_H1 0\n#endif\n')
    use = "#pragma once\n#if KC_DHAS\n#define KC_H2 1\n#else\n#define KC_H2 0\n#endif\n"
    link = rng.random() < 0.4  # the -I directory a symbolic link to the real one
    setup = [("write", "inc1/sub/use.h", use),
             ("write", "src/k.cu", kernel(pre, 2, [("KC_H0", None), ("KC_H1", None),
                                                  ("KC_H2", None)]))]
    if link:
        setup.append(("ln", "incl", "inc1"))
    homes = ["src", "inc1", "inc1/sub", "inc2"]
    for slot, n in enumerate(["opt4.h", "opt5.h"]):
        for d in homes:
            op = f.add("%s/%s" % (d, n), slot)
            if rng.random() < 0.3:
                setup.append(op)
    # Through /proc/self/cwd from the tree's root (NVRTC folds "/proc/self/cwd/.."
    # lexically, to a directory that is not there).
    top = "/proc/self/cwd/" if root_kind == "proc" else "{R}/"
    incs = [top + ("incl" if link else "inc1"), top + "inc2"]
    cfg = dict(source="src/k.cu", cwd="." if root_kind == "proc" else "src", incs=incs,
               defines=dvalue_defines(rng), mem=[], paths=list(PATHS))
    if root_kind == "shm":
        cfg["root"] = "shm"
    edits = []
    present = {op[1] for op in setup}
    for _ in range(rng.randint(*EDITS)):
        r = rng.random()
        rel = rng.choice(list(f.specs))
        if r < 0.2:
            edits.append([("set", "defines", dvalue_defines(rng, rng.random() < 0.1))])
        elif r < 0.3:
            edits.append([("set", "extra", rng.choice([[], ["-UKC_DHAS"],
                                                      ["-UKC_DHAS", "-DKC_DHAS=0"]]))])
        else:
            edits.append([f.step(rel, present, r < 0.55)])
    return setup, cfg, edits


def gen_shm(rng):
    """The -D __has_include tree under /dev/shm (scratch trees in containers)."""
    return gen_dvalue(rng, "shm")


def gen_proccwd(rng):
    """The -D __has_include tree with its -I directories reached through /proc/self/cwd."""
    return gen_dvalue(rng, "proc")


def gen_arch(rng):
    """Several -arch options: NVRTC compiles for the first (the library and the drop-in)."""
    f = Files(rng)
    setup = simple_tree(rng, f)

    def pick():
        return rng.choice(ARCH_LISTS), rng.choice(["cubin", "ptx", "cubin"])

    archs, kind = pick()
    cfg = dict(source="src/k.cu", cwd="src", incs=["{R}/inc1"], defines=[], mem=[],
               extra=archs, arch="-", kind=kind, name="k.cu", paths=["lib", "dropin"])
    edits = []
    for _ in range(rng.randint(*EDITS)):
        if rng.random() < 0.5:
            archs, kind = pick()
            edits.append([("set", "extra", archs), ("set", "kind", kind)])
        else:
            edits.append([f.edit(rng.choice(list(f.specs)))])
    return setup, cfg, edits


def program_name(rng, under="/tmp"):
    """A name as CuPy gives every program: a new temporary directory's kern.cu (at
    times another base name: an anonymous namespace's members are named after it)."""
    base = rng.choice(["kern.cu"] * 4 + ["k2.cu", "my-kern.v2.cu"])
    return "%s/tmp%s/%s" % (under, "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789_")
                                           for _ in range(rng.choice([8, 8, 8, 3, 14]))), base)


# Where the program's name reaches NVRTC's answer (compile/progname.c): each a
# prelude for the source, expressions it stores, and options. "plain": nowhere.
NAME_USES = {
    "plain": ("", [], []),
    "file-in-main": ("", [("(int)sizeof(__FILE__)", None), ("__FILE__[sizeof(__FILE__) - 10]",
                                                            None)], []),
    "file-string": ("__device__ const char *kc_where = __FILE__;\n",
                    [("kc_where[threadIdx.x]", None)], []),
    "macro-from-header": ('#include "where.h"\n', [("KC_WHERE[sizeof(KC_WHERE) - 9]", None)],
                          []),
    "line-directive": ("#line 300\n", [("__FILE__[sizeof(__FILE__) - 12] + __LINE__", None)],
                       []),
    "line-named": ('#line 300 "fixed/k.cu"\n', [("(int)sizeof(__FILE__)", None)], []),
    "assert": ("", [("(assert(o != nullptr), 7)", None)], []),
    "lineinfo": ("", [], ["-lineinfo"]),
    "device-debug": ("", [], ["-G"]),
    "warning": ("__device__ int kc_warned() { int kc_unused; return 3; }\n",
                [("kc_warned()", None)], []),
    "beside-name": ('#include "pn.h"\n', [], []),
    "anonymous-namespace": ("namespace { __device__ int kc_anon = 11; }\n", [("kc_anon", None)],
                            []),
}


# Warnings besides the name's use, each a prelude, expressions it stores and what the
# headers add: NVRTC starts every diagnostic with the name, and a log that shows it
# only there is kept as a template (compile/progname.c); one that shows it
# elsewhere must not be.
KC_TW = "template <class T> __device__ T kc_tw(T t) { return t << 40; }"
WARNINGS = {
    "unused": ("__device__ int kc_w2() { int kc_unused2; return 5; }\n", [("kc_w2()", None)],
               ""),
    "directive": ("#warning the program warns\n", [], ""),
    "quoted": ("#warning kern.cu is quoted\n", [], ""),
    # "... detected during instantiation of ... at line 7": in the program, no name...
    "instantiated": (KC_TW + "\n", [("kc_tw(1)", None)], ""),
    # ... from a header, "at line 7 of NAME": the name past the prefix.
    "instantiated-header": ("", [("kc_tw(2)", None)], KC_TW),
    # In a header (pn.h beside some names too: its path holds the name's directory).
    "header": ("", [], "#warning the header warns"),
}


# Names a ## can build (compile/paste.c): the program's name through __FILE__,
# __BASE_FILE__ or a header's macro that expands __FILE__; __LINE__ and a namespace
# that carry no name (CCCL's _LIBCUDACXX_CONCAT(__, _LIBCUDACXX_CUDA_ABI_VERSION)).
PASTED = {"__FILE__": "(int)sizeof(%s)", "__BASE_FILE__": "%s[sizeof(%s) - 7]",
          "KC_WHERE": "(int)sizeof(%s)", "__LINE__": "%s", "kc_ns_value": "%s"}
PASTE_HEADER = """#define KC_CAT(a, b) a##b
#define KC_XCAT(a, b) KC_CAT(a, b)
#define KC_ABI 4
namespace KC_XCAT(__, KC_ABI) { __device__ const int kc_ns_value = 5; }
"""


def paste_pieces(rng, pieces, tag):
    """Each piece handed to a paste its own way: spelled in the call, an object-like
    macro of the header (KC_<tag>P<n>), a -D value (KC_<tag>D<n>), or pasted itself.
    Returns (the header's #defines, options, the paste's arguments, the ways)."""
    defs, opts, args, ways = "", [], [], []
    for n, piece in enumerate(pieces):
        way = rng.choice(["call", "macro", "define", "pasted"] if len(piece) > 1 else
                         ["call", "macro", "define"])
        ways.append(way)
        if way == "call":
            args.append(piece)
        elif way == "macro":
            defs += "#define KC_%sP%d %s\n" % (tag, n, piece)
            args.append("KC_%sP%d" % (tag, n))
        elif way == "define":
            opts.append("-DKC_%sD%d=%s" % (tag, n, piece))
            args.append("KC_%sD%d" % (tag, n))
        else:
            cut = rng.randrange(1, len(piece))
            args.append("KC_CAT(%s, %s)" % (piece[:cut], piece[cut:]))
    return defs, opts, args, ways


def paste_use(rng):
    """A name built by ## of random pieces, each handed in its own way: spelled in
    the call, an object-like macro of the header, a -D value, or pasted itself.
    Returns (prelude, exprs, options, the header's text, the shape)."""
    target = rng.choice(sorted(PASTED))
    if target == "kc_ns_value":
        head = "KC_XCAT(__, KC_ABI)" if rng.random() < 0.5 else "KC_CAT(__, 4)"
        expr = "::%s::kc_ns_value" % head
        return '#include "kcpaste.h"\n', [(expr, None)], [], PASTE_HEADER, "paste namespace"
    # One cut inside FILE: a piece that spelled it whole would be judged where it is
    # spelled, and the paste would not be what decides.
    at = target.find("FILE")
    first = rng.randint(at + 1, at + 3) if at >= 0 else rng.randrange(1, len(target))
    cuts = {first}
    if rng.random() < 0.5:
        cuts.add(rng.randrange(1, len(target)))
    cuts = sorted(cuts)
    pieces = [target[i:j] for i, j in zip([0] + cuts, cuts + [len(target)])]
    defs, opts, args, ways = paste_pieces(rng, pieces, "")
    header = PASTE_HEADER + defs
    through = rng.random() < 0.5
    if len(args) == 3:
        call = "KC_XCAT(KC_XCAT(%s, %s), %s)" % tuple(args)
    elif any(w != "call" for w in ways) or through:
        call = "KC_XCAT(%s, %s)" % tuple(args)
    else:
        call = "KC_CAT(%s, %s)" % tuple(args)
    if target == "KC_WHERE":
        header = '#include "where.h"\n' + header
    if rng.random() < 0.3:
        header += "#define KC_PASTED %s\n" % call  # the paste in the header's macro
        call = "KC_PASTED"
    form = PASTED[target]
    expr = form % ((call,) * form.count("%s"))
    return ('#include "kcpaste.h"\n', [(expr, None)], opts, header,
            "paste %s (%s)" % (target, ", ".join(ways)))


# What a header's own code can paste (compile/paste.c): __BASE_FILE__, and
# __builtin_FILE as a default argument, are the program's name there; a header
# macro that expands __BASE_FILE__ too; __LINE__ carries no name, and must not
# keep a program from hitting. (A header's own __FILE__ is its include spelling
# in kcache's compile, its path in NVRTC's: the one documented difference.)
HEADER_PASTED = {
    "__BASE_FILE__": "__device__ const int kc_hlen = sizeof(%s);\n",
    "__builtin_FILE": "__device__ inline int kc_hlen_f(const char *f = %s()) "
                      "{ int n = 0; while (f[n]) n++; return n; }\n"
                      "#define kc_hlen kc_hlen_f()\n",
    "KC_WHERE_B": "__device__ const int kc_hlen = sizeof(%s);\n",
    "__LINE__": "__device__ const int kc_hlen = %s;\n",
}


def header_paste_use(rng):
    """A header's code (a header, or an -include file) pastes a name of HEADER_PASTED
    of random pieces (any cuts), through one or two macro levels, each piece handed
    in its own way (as paste_use's). Returns (prelude, exprs, options, the header's
    text, the pre-included file's text or None, the shape)."""
    target = rng.choice(sorted(HEADER_PASTED))
    cuts = sorted(rng.sample(range(1, len(target)), rng.choice([1, 1, 2])))
    pieces = [target[i:j] for i, j in zip([0] + cuts, cuts + [len(target)])]
    defs, opts, args, ways = paste_pieces(rng, pieces, "H")
    defs = PASTE_HEADER + "#define KC_WHERE_B __BASE_FILE__\n" + defs
    if len(args) == 3:
        call = "KC_XCAT(KC_XCAT(%s, %s), %s)" % tuple(args)
    elif any(w != "call" for w in ways) or rng.random() < 0.5:
        call = "KC_XCAT(%s, %s)" % tuple(args)
    else:
        call = "KC_CAT(%s, %s)" % tuple(args)
    # One more macro level, or none: a function-like macro handed the paste, or an
    # object-like one that holds it.
    level = rng.choice(["direct", "wrapped", "object"])
    if level == "wrapped":
        defs += "#define KC_HWRAP(x) x\n"
        call = "KC_HWRAP(%s)" % call
    elif level == "object":
        defs += "#define KC_HOBJ %s\n" % call
        call = "KC_HOBJ"
    code = HEADER_PASTED[target] % call
    pre = rng.random() < 0.4
    where = "pre-include" if pre else "header"
    if pre:
        opts += ["-include", "{R}/inc1/kcpre.h"]
        header, pre_text = defs, code
    else:
        header, pre_text = defs + code, None
    return ('#include "kcpaste.h"\n' if not pre else "", [("kc_hlen", None)], opts,
            header, pre_text, "header paste %s (%s; %s; %s)" %
            (target, ", ".join(ways), level, where))


def gen_progname(rng, paste=False, header_paste=False):
    """Programs named <a new temporary directory>/kern.cu, the source's text the same.

    The names are drawn from a few directories under the tree (so that a name
    comes back and hits what it made) and from /tmp; the source uses the name
    one way of NAME_USES (or none), so that a result made under one name and
    served under another shows: __FILE__ in the program and through a header's
    macro, #line, assert, line information, a warning in the log, a
    "quoted" include that some names' directories hold beside the name, and
    names built by ## of random pieces (paste_use; with paste, only those), and
    by ## in a header's own code (header_paste_use; with header_paste, only those).
    """
    f = Files(rng)
    use = ("header-paste" if header_paste else "paste" if paste else
           rng.choice(list(NAME_USES) + ["paste"] * 4 + ["header-paste"] * 2))
    # At times a warning too (WARNINGS, or a #warning in a header), so that logs with
    # the name in them are served under other names.
    warn = rng.choice([None] * 4 + list(WARNINGS))
    if use == "beside-name" and rng.random() < 0.5:
        warn = "header"
    w_prelude, w_extra, h_extra = WARNINGS.get(warn, ("", [], ""))
    setup = [f.add("inc1/a.h", 0, extra=h_extra), f.add("inc1/b.h", 1),
             f.add("inc1/pn.h", 2, extra=h_extra if warn == "header" else ""),
             ("write", "inc1/where.h", "#define KC_WHERE __FILE__\n")]
    if use == "header-paste":
        prelude, extra, opts, text, pre, use = header_paste_use(rng)
        setup.append(("write", "inc1/kcpaste.h", text))
        if pre is not None:  # the -include file includes the definitions first
            setup.append(("write", "inc1/kcpre.h", '#include "kcpaste.h"\n' + pre))
    elif use == "paste":
        prelude, extra, opts, text, use = paste_use(rng)
        setup.append(("write", "inc1/kcpaste.h", text))
    else:
        prelude, extra, opts = NAME_USES[use]
    prelude, extra = w_prelude + prelude, list(w_extra) + list(extra)
    setup.append(("write", "src/k.cu", kernel(prelude + '#include "a.h"\n#include <b.h>\n', 3,
                                              extra)))
    pool = [program_name(rng, "{R}/names") for _ in range(3)]

    def name():
        return rng.choice(pool) if rng.random() < 0.6 else program_name(rng)

    def beside(n):
        """pn.h beside the name (a new value), or none there."""
        if not n.startswith("{R}/") or use != "beside-name":
            return []
        rel = os.path.join(os.path.dirname(n[len("{R}/"):]), "pn.h")
        if rng.random() < 0.5:
            return [("rm", rel)]
        return [f.add(rel, 2, extra=h_extra if warn == "header" else "") if rel not in f.specs
                else f.edit(rel)]

    first = name()
    setup += beside(first)
    cfg = dict(source="src/k.cu", cwd="src", incs=["{R}/inc1"], defines=[], mem=[],
               extra=list(opts), name=first, name_use=use, paths=["lib", "dropin"])
    if rng.random() < 0.3:
        cfg.update(kind="cubin", arch="sm_90")
    if use == "beside-name":
        # The library searches beside source_path (the driver's file), not beside
        # the name: only the drop-in is asked for what NVRTC finds beside the name.
        cfg["paths"] = ["dropin"]
    edits = []
    for _ in range(rng.randint(*EDITS)):
        n = name()
        step = [("set", "name", n)] + beside(n)
        if rng.random() < 0.3:
            step.append(f.edit(rng.choice(["inc1/a.h", "inc1/b.h", "inc1/pn.h"])))
        edits.append(step)
    return setup, cfg, edits


def macroarg_expr(rng, op, n):
    """A condition that reaches __has_include(op) through macro arguments, and the
    macros it needs as (name with parameters, body); names end in n."""
    w = ("KC_MW%d(x)" % n, "__has_include(x)")
    name = op.strip('"<>')
    forms = [
        ("KC_MW%d(%s)", [w]),
        ("KC_MCALL%d(KC_MW%d)", [w, ("KC_MCALL%d(m)" % n, "m(%s)" % op)]),
        ("KC_MAP%d(KC_MW%d, %s)", [w, ("KC_MAP%d(f, x)" % n, "f(x)")]),
        ("KC_MC%d(__has_, include)(%s)", [("KC_MC%d(a, b)" % n, "a##b")]),
        ("KC_MC%d(KC_M, W%d)(%s)", [w, ("KC_MC%d(a, b)" % n, "a ## b")]),
        ("KC_MID%d(KC_MW%d)(%s)", [w, ("KC_MID%d(x)" % n, "x")]),
        ("KC_MG%d(%s)", [w, ("KC_MG%d" % n, "KC_MW%d" % n)]),
        ("KC_MV%d(KC_MW%d, %s)", [w, ("KC_MV%d(f, ...)" % n, "f(__VA_ARGS__)")]),
        ("KC_MAP%d(KC_MC%d(KC_M, W%d), KC_MQX%d(KC_MNAME%d))",
         [w, ("KC_MAP%d(f, x)" % n, "f(x)"), ("KC_MC%d(a, b)" % n, "a##b"),
          ("KC_MQ%d(x)" % n, "#x"), ("KC_MQX%d(x)" % n, "KC_MQ%d(x)" % n),
          ("KC_MNAME%d" % n, name)]),
        ("KC_MW%d(KC_MS%d(%s))", [w, ("KC_MS%d(x)" % n, "#x")]),
    ]
    if rng.random() < 0.05:  # __has_include_next, made by pasting: never followed
        forms = [("KC_MC%d(__has_include, _next)(%s)", [("KC_MC%d(a, b)" % n, "a##b")])]
    form, defs = rng.choice(forms)
    args = []
    for part in form.split("%")[1:]:
        args.append(name if part.startswith("s") and "KC_MS" in form and "(%s))" in form
                    else op if part.startswith("s") else n)
    return form % tuple(args), defs


def macroarg_defines(rng, exprs, defs):
    """Where each macro is defined: the source, a header it includes, -D or an -include'd
    file; a wrapper or a caller in both branches of #ifdef KC_MSEL, the other one
    probing nothing or another name."""
    where = {"src": [], "hdr": [], "D": [], "pre": []}
    for head, body in defs:
        at = rng.choice(list(where))
        if at == "D":
            where["D"].append("%s=%s" % (head, body))
            continue
        line = "#define %s %s\n" % (head, body)
        other = {"KC_MW": "0", "KC_MCALL": 'm("none.h")', "KC_MAP": "f(<none.h>)"}
        other = [v for k, v in other.items() if head.startswith(k)]
        if other and rng.random() < 0.4:
            line = "#ifdef KC_MSEL\n%s#else\n#define %s %s\n#endif\n" % (line, head, other[0])
        where[at].append(line)
    return where


def gen_macroarg(rng):
    """Macro text reaching __has_include through a function-like macro's arguments:
    a wrapper handed in and called, names pasted with ##, header names made with #,
    rescanning with the tokens after a call, through -D and -include (issue 32)."""
    f = Files(rng)
    conds, defs = [], []
    seen = set()
    for n in range(2):
        op = rng.choice(['"opt4.h"', "<opt4.h>", '"opt5.h"', "<opt5.h>"])
        expr, ds = macroarg_expr(rng, op, n)
        conds.append(expr)
        for dd in ds:
            if dd[0] not in seen:
                seen.add(dd[0])
                defs.append(dd)
    where = macroarg_defines(rng, conds, defs)
    branch = "#define KC_H%d 1\n#else\n#define KC_H%d 0\n#endif\n"
    pre = ('#include "mdefs.h"\n' + "".join(where["src"]) + "#if %s\n" % conds[0] +
           branch % (0, 0) + '#include "sub/use.h"\n')
    use = "#pragma once\n#if %s\n" % conds[1] + branch % (1, 1)
    setup = [("write", "inc1/sub/use.h", use), ("write", "inc1/mdefs.h", "".join(where["hdr"])),
             ("write", "src/pre.h", "".join(where["pre"])),
             ("write", "src/k.cu", kernel(pre, 2, [("KC_H0", None), ("KC_H1", None)]))]
    homes = ["src", "inc1", "inc1/sub", "inc2"]
    for slot, n in enumerate(["opt4.h", "opt5.h"]):
        for d in homes:
            op = f.add("%s/%s" % (d, n), slot)
            if rng.random() < 0.3:
                setup.append(op)

    def extra():
        return ["-include", "{R}/src/pre.h"] + (["-DKC_MSEL"] if rng.random() < 0.5 else [])

    cfg = dict(source="src/k.cu", cwd="src", incs=["{R}/inc1", "{R}/inc2"],
               defines=where["D"], mem=[], extra=extra(), macroarg=True, paths=list(PATHS))
    edits = []
    present = {op[1] for op in setup}
    for _ in range(rng.randint(*EDITS)):
        r = rng.random()
        rel = rng.choice(list(f.specs))
        if r < 0.15:
            edits.append([("set", "extra", extra())])
        else:
            edits.append([f.step(rel, present, r < 0.5)])
    return setup, cfg, edits


# ---- the paths NVRTC writes: a header's own __FILE__ and the log's file names ---------------

# How a header's own code reaches its path (plain NVRTC writes the path it opened
# the header by: the -I operand as given joined with the spelling, unfolded).
# Each a text with {i} for the header's id, and what the kernel stores from it.
PATH_USES = {
    "direct": ("__device__ inline const char *kc_f{i}() {{ return __FILE__; }}\n",
               "kc_f{i}()[threadIdx.x]"),
    "macro": ("#define KC_HWHERE{i} __FILE__\n"
              "__device__ inline const char *kc_m{i}() {{ return KC_HWHERE{i}; }}\n",
              "kc_m{i}()[threadIdx.x]"),
    "assert": ("__device__ inline int kc_a{i}(const int *o) {{ assert(o != nullptr); "
               "return {i}; }}\n", "kc_a{i}(o)"),
    "sizeof": ("__device__ const int kc_s{i} = sizeof(__FILE__);\n", "kc_s{i}"),
    "warn": ("__device__ inline int kc_w{i}() {{ int kc_unused{i}; return {i}; }}\n",
             "kc_w{i}()"),
    # The control: __FILE__ where nothing reaches the output.
    "uncalled": ("template <class T> __device__ const char *kc_t{i}() {{ return __FILE__; }}\n"
                 "__device__ inline const char *kc_u{i}() {{ return __FILE__; }}\n", None),
}
# A user header that includes the toolkit's: cuda::std::span's operator[] asserts
# with CCCL's path under -DCCCL_ENABLE_ASSERTIONS, and a warning in a template
# that cuda::std::invoke instantiates names the toolkit's file in the log.
TK_HEADER = """#pragma once
#include <cuda/std/span>
#include <cuda/std/functional>
template <class T> __device__ int kc_tw(T t) { return t << 40; }
struct KcF { template <class T> __device__ int operator()(T t) const { return kc_tw(t); } };
__device__ inline int kc_tk(int *o) {
    cuda::std::span<int, 4> s(o, 4);
    return s[threadIdx.x] + cuda::std::invoke(KcF{}, 1);
}
#define KC_TKX kc_tk(o)
"""
# The program's name, and the working directory (below the place): "p" holds it.
PATH_NAMES = {"bare": ("p", "kern.cu"), "dot": ("p", "./kern.cu"), "dir": (".", "p/kern.cu"),
              "dotdir": (".", "./p/kern.cu"), "abs": (None, "{R}/{P}/p/kern.cu")}
PATH_SPELLINGS = ["plain", "slash", "slashes", "dot", "abs", "parent"]
PATH_FORMS = ["-Idir", "-I dir", "--include-path=dir"]


def toolkit_link():
    """The toolkit's CCCL by its symbolic link and by its real path, or None (no CCCL
    there, or no link on the way to it: nothing to tell apart)."""
    if not os.path.isdir(CCCL) or os.path.realpath(CCCL) == os.path.abspath(CCCL):
        return None
    return CCCL, os.path.realpath(CCCL)


def inc_spelling(how, cwd, place):
    """The place's inc directory as an -I operand spelled how, from cwd (below the place)."""
    rel = os.path.normpath(os.path.relpath("inc", cwd))
    return {"plain": rel, "slash": rel + "/", "slashes": rel + "//", "dot": "./" + rel,
            "abs": "{R}/%s/inc" % place,
            "parent": "../%s/%s" % (place if cwd == "." else os.path.basename(cwd), rel)}[how]


def gen_paths(rng):
    """The paths NVRTC writes into its output: headers that expand their own __FILE__
    in device code (a function, a macro of theirs, assert, sizeof) or warn (their
    path in the log), __FILE__ nowhere used (the control); -I spelled every way
    NVRTC keeps as given ("inc//", "./inc", "../p/inc", absolute; -Iinc, -I inc,
    --include-path=), "sub/../b.h" found beside its includer, headers beside the
    program, programs named with and without a directory; the tree in two places
    compiled in turn through one cache (relocation); the toolkit's CCCL by its
    symbolic link and by its real path (assertions, and a warning its template
    instantiates). Every result, bytes and log, must be NVRTC's in that place."""
    f = Files(rng)
    control = rng.random() < 0.2
    uses = ["uncalled"] if control else list(PATH_USES)
    # Each header one to three uses (the control: only __FILE__ never used).
    heads = {"inc/a.h": 0, "inc/b.h": 1, "inc/c.h": 2, "inc/d.h": 3, "inc/sub/s.h": 4,
             "p/near.h": 5}
    chosen, exprs = {}, []
    for rel, i in heads.items():
        chosen[rel] = sorted(set(rng.choice(uses) for _ in range(rng.randint(1, 3))))
        for u in chosen[rel]:
            if PATH_USES[u][1]:
                exprs.append((PATH_USES[u][1].format(i=i), None))
    # b.h beside a.h through "sub/..", at times (kcache may then judge b.h reached by
    # two paths and compile uncached: the hits, and so the relocation, need the rest).
    includes = {"inc/a.h": ['#include "%s"' % rng.choice(["sub/../b.h", "sub/.././b.h"]
                                                         if rng.random() < 0.35 else
                                                         ["b.h"])]}
    tk = toolkit_link()
    texts = {}
    for rel, i in heads.items():
        extra = "".join(PATH_USES[u][0].format(i=i) for u in chosen[rel])
        f.add("A/" + rel, i, includes.get(rel, ()), rng.choice(["once", "guard"]), extra)
        f.specs["B/" + rel] = dict(f.specs["A/" + rel])
        texts[rel] = f.text("A/" + rel)
    pre = ['#include "near.h"' if rng.random() < 0.7 else '#include "./near.h"',
           '#include "a.h"', "#include <c.h>", "#include <sub/s.h>",
           '#include "%s"' % rng.choice(["../inc/d.h", "../inc/./d.h", "../inc//d.h"])]
    if rng.random() < 0.5:
        pre.insert(rng.randint(1, len(pre)), "#include <b.h>")  # b.h: first by which path?
    pre.append('#ifdef KC_TK\n#include "tkw.h"\n#endif')
    source = kernel("\n".join(pre), len(heads), exprs + [("KC_TKX", "0")])
    setup = []
    for place in ("A", "B"):
        setup += [("write", "%s/%s" % (place, rel), texts[rel]) for rel in heads]
        setup += [("write", place + "/inc/tkw.h", TK_HEADER),
                  ("write", place + "/p/kern.cu", source)]
    state = dict(place="A", name=rng.choice(list(PATH_NAMES)), incs=[], abs_cwd="p",
                 tk=None)

    def draw_spellings():
        state["name"] = rng.choice(["bare"] * 3 + ["dot", "dir", "dir", "dotdir", "abs", "abs"])
        state["abs_cwd"] = rng.choice([".", "p"])
        state["incs"] = [(rng.choice(PATH_SPELLINGS), rng.choice(PATH_FORMS))
                         for _ in range(rng.choice([1, 1, 1, 2]))]

    def config(moved=False):
        """The ops that set the compile for the state: where, the name, the options."""
        place = state["place"]
        cwd, name = PATH_NAMES[state["name"]]
        cwd = cwd or state["abs_cwd"]
        extra = []
        for how, form in state["incs"]:
            s = inc_spelling(how, cwd, place)
            extra += (["-I" + s] if form == "-Idir" else ["-I", s] if form == "-I dir" else
                      ["--include-path=" + s])
        if state["tk"] is not None:
            extra += ["-I" + tk[state["tk"]], "-DCCCL_ENABLE_ASSERTIONS", "-DKC_TK"]
        name = name.replace("{P}", place)
        info = dict(place=place, name=state["name"], incs=["%s %s" % i for i in state["incs"]],
                    tk=["symlinked", "real"][state["tk"]] if state["tk"] is not None else None,
                    moved=moved, control=control, uses=sorted(set(sum(chosen.values(), []))))
        return [("set", "cwd", os.path.normpath(os.path.join(place, cwd))),
                ("set", "source", place + "/p/kern.cu"),
                ("set", "name", name), ("set", "arg", name), ("set", "extra", extra),
                ("set", "pinfo", info)]

    draw_spellings()
    if tk is not None and rng.random() < 0.3:
        state["tk"] = rng.randint(0, 1)
    first = config()
    cfg = dict(source="A/p/kern.cu", cwd=None, incs=[], defines=[], mem=[], extra=[],
               name=None, paths=list(PATHS), pathkind=True)
    for op in first:
        cfg[op[1]] = op[2]
    edits = []
    for n in range(rng.randint(*EDITS)):
        r = rng.random()
        if n == 0 or r < 0.35:
            # The same spellings in the other place, through the same cache.
            state["place"] = "B" if state["place"] == "A" else "A"
            edits.append(config(moved=True))
        elif r < 0.55:
            draw_spellings()
            edits.append(config())
        elif r < 0.8 or tk is None:
            # New contents: in both places (mostly), or in one.
            rel = rng.choice(list(heads))
            how = rng.choice(["write", "same", "replace"])
            step = []
            for place in rng.choice([("A", "B"), ("A", "B"), ("A",), ("B",)]):
                s = f.specs[place + "/" + rel]
                old = s["value"]
                while s["value"] == old:
                    s["value"] = rng.randint(100, 999)
                step.append((how, place + "/" + rel, f.text(place + "/" + rel)))
            edits.append(step)
        else:
            state["tk"] = None if state["tk"] is not None and rng.random() < 0.4 else \
                rng.randint(0, 1)
            edits.append(config())
    return setup, cfg, edits


GENERATORS.update({"options": gen_options, "env": gen_env, "dvalue": gen_dvalue,
                   "shm": gen_shm, "proccwd": gen_proccwd, "arch": gen_arch,
                   "progname": gen_progname, "macroarg": gen_macroarg,
                   "progpaste": lambda rng: gen_progname(rng, paste=True),
                   "hdrpaste": lambda rng: gen_progname(rng, header_paste=True),
                   "paths": gen_paths})
WEIGHTS.update({"options": 2, "env": 1, "dvalue": 2, "shm": 1, "proccwd": 1, "arch": 1,
                "progname": 3, "macroarg": 2, "progpaste": 1, "hdrpaste": 1, "paths": 3})
# Issue 32's kinds: the bounded run (meson test) runs each once, first, with few steps.
NEW_KINDS = ["options", "env", "dvalue", "shm", "proccwd", "arch", "progname", "macroarg",
             "hdrpaste", "paths"]
REJECTED_SPELLINGS = {tuple(o) for o in NVRTC_REJECTED}


def step_classes(cfg, root):
    """The classes a step's compile touches, for the long mode's counts."""
    out = []
    extra = [o.replace("{R}", root) for o in cfg.get("extra", [])]
    if cfg.get("optclass"):
        out.append("nvrtc-options")
    joined = "\0".join(extra)
    if any("\0".join(o).replace("{R}", root) in joined for o in REJECTED_SPELLINGS):
        out.append("rejected-spellings")
    names = [o.split("=")[0] for o in extra if o.startswith("-")]
    if len(names) != len(set(names)) and not cfg.get("pathkind"):  # its -I: "paths: ..."
        out.append("repeated-options")
    out += ["env " + k for k in sorted(cfg.get("env", {}))]
    if any("__has_include" in d for d in cfg["defines"] + extra):
        out.append("-D with __has_include")
    if cfg.get("macroarg"):
        out.append("macro arguments to __has_include")
    if cfg.get("root") == "shm":
        out.append("tree under /dev/shm")
    if any(i.startswith("/proc/self/") for i in cfg["incs"]):
        out.append("-I through /proc/self/cwd")
    if any(not i.startswith("/proc/") and os.path.realpath(i) != os.path.abspath(i) and
           os.path.abspath(i).startswith(root) for i in cfg["incs"]):
        out.append("symlinked -I")
    if sum(1 for o in extra if o.startswith(("-arch", "--gpu-architecture"))) > 1:
        out.append("several -arch")
    if "/tmp" in (cfg.get("name") or "") and not cfg.get("pathkind"):
        out.append("random program name")
    if cfg.get("name_use"):
        out.append("program name: " + cfg["name_use"])
    if cfg.get("kind", "ptx") != "ptx":
        out.append("output " + cfg["kind"])
    info = cfg.get("pinfo")
    if info:
        out += ["paths: header __FILE__ " + u for u in info["uses"] if u != "uncalled"]
        if "uncalled" in info["uses"]:
            out.append("paths: __FILE__ uncalled" + (" only (control)" if info["control"]
                                                     else ""))
        out.append("paths: program named " + PATH_NAMES[info["name"]][1].replace("{R}/{P}",
                                                                               "/abs"))
        for how, form in (i.split(" ", 1) for i in info["incs"]):
            out += ["paths: -I spelled " + how, "paths: -I given as " + form]
        if len(info["incs"]) > 1:
            out.append("paths: one -I directory by two spellings")
        out.append("paths: place " + info["place"] + (" (relocated)" if info["moved"] else ""))
        if info["tk"]:
            out.append("paths: toolkit CCCL by its %s path" % info["tk"])
    return out

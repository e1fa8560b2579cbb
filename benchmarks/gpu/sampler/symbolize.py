#!/usr/bin/env python3
"""Reads a sampler.c profile (PREFIX.PID): time inside kcache's functions (inclusive),
and with FUNCTION arguments, the call chains that reach each.

    symbolize.py PREFIX.PID [FUNCTION ...] [--build build-gpu]

Addresses in the drop-in and libkcache are named with addr2line from the
unstripped build the staged copies came from (--build, default build-gpu: the
same build-id as .dev/gpu's); other libraries are named by file.
"""
import sys, collections, subprocess, os, bisect
args = [a for a in sys.argv[1:]]
build = "build-gpu"
if "--build" in args:
    i = args.index("--build"); build = args[i + 1]; del args[i:i + 2]
path = args[0]
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BUILD = os.path.join(REPO, build)
lines = open(path).read().split("\n")
ns = int(lines[0].split()[1])
samples = [l.split() for l in lines[1:1+ns]]
maps = []
for l in lines[2+ns:]:
    f = l.split()
    if len(f) >= 6 and 'x' in f[1]:
        a, b = (int(x, 16) for x in f[0].split('-'))
        maps.append((a, b, int(f[2], 16), f[5]))
maps.sort()
starts = [m[0] for m in maps]
def local_for(p):
    base = os.path.basename(p)
    if "/nvrtc-shim/" in p and base.startswith("libnvrtc"):
        return os.path.join(BUILD, "lib", "nvrtc-shim", base)
    if base.startswith("libkcache") and os.path.exists(os.path.join(BUILD, "lib", base)):
        return os.path.join(BUILD, "lib", base)
    return None
def where(a):
    i = bisect.bisect_right(starts, a) - 1
    if i < 0 or a >= maps[i][1]: return ("?", 0)
    m = maps[i]
    return (m[3], a - m[0] + m[2])
# collect addresses per module
want = collections.defaultdict(set)
res = []
for s in samples:
    fr = []
    for x in s:
        mod, off = where(int(x, 16))
        fr.append((mod, off))
        if local_for(mod): want[mod].add(off)
    res.append(fr)
names = {}
for mod, offs in want.items():
    lp = local_for(mod)
    offs = sorted(offs)
    out = subprocess.run(["addr2line", "-f", "-C", "-e", lp] + ["%x" % (o - 1 if o else 0) for o in offs],
                         capture_output=True, text=True).stdout.split("\n")
    for i, o in enumerate(offs):
        names[(mod, o)] = out[2 * i]
def name(fr):
    mod, off = fr
    if (mod, off) in names: return names[(mod, off)]
    return os.path.basename(mod)
selfc = collections.Counter(); incl = collections.Counter(); modself = collections.Counter()
for fr in res:
    if not fr: continue
    fr2 = [f for f in fr if "sampler.so" not in f[0]]
    if fr2 and fr2[0][0].endswith("libc.so.6"):
        fr2 = fr2[1:]  # the signal's return trampoline
    if not fr2:
        continue
    top = fr2[0]
    selfc[name(top)] += 1
    modself[os.path.basename(fr2[0][0])] += 1
    seen = set()
    for f in fr2:
        n = name(f)
        if f in names and n not in seen:
            seen.add(n); incl[n] += 1
tot = len(res)
print("samples", tot)
print("== self by module"); [print("%6d %5.1f%% %s" % (v, 100*v/tot, k)) for k, v in modself.most_common(12)]
print("== inclusive, kcache functions"); [print("%6d %5.1f%% %s" % (v, 100*v/tot, k)) for k, v in incl.most_common(45)]
print("== self, top"); [print("%6d %5.1f%% %s" % (v, 100*v/tot, k)) for k, v in selfc.most_common(25)]
# callers of selected functions
import itertools
for target in args[1:]:
    cc = collections.Counter()
    for fr in res:
        fr2 = [f for f in fr if "sampler.so" not in f[0]]
        if fr2 and fr2[0][0].endswith("libc.so.6"):
            fr2 = fr2[1:]
        nm = [name(f) for f in fr2]
        if target in nm:
            i = nm.index(target)
            chain = " < ".join(nm[i:i+6])
            cc[chain] += 1
    print("== chains from", target)
    for k, v in cc.most_common(8): print("%6d %s" % (v, k))

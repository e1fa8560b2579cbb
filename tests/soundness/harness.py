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
compared without its comment lines (NVRTC's banner); nothing else is dropped.
Found empirically: for these kernels kcache's PTX is NVIDIA's byte for byte,
comments included (the summary counts any step where only the comment lines
differ). The paths kind is where a header's path reaches the output (its own
__FILE__, assert, a warning in the log): there the PTX must be NVRTC's byte
for byte and the log too, on every path (the CLI's log from its JSON). Warm results are also compared, byte for byte, with
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
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

# The scenarios and the repro scripts live beside this file (the script's
# directory is the first on Python's path).
from scenarios import (ARCH, EDITS, GENERATORS, NEW_KINDS, PATHS, SHIFT_NS, Scenario, apply_op,
                       make_scenario, snapshot, step_classes)
from repro import write_repro



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

    def compile(self, mode, cwd, path, opts, headers, cfg=None):
        return self.send(mode, cwd, path, opts, headers, cfg) or self.receive(cfg)

    def send(self, mode, cwd, path, opts, headers, cfg=None):
        """Sends a request (the answer is receive()'s); a Result if the driver is gone."""
        self.start()
        cfg = cfg or {}
        fields = [("mode", mode), ("arch", cfg.get("arch", ARCH[0])),
                  ("kind", cfg.get("kind", "ptx")), ("cwd", cwd), ("path", path)]
        if cfg.get("name"):
            fields.append(("name", cfg["name"]))
        try:
            for tag, val in fields:
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

    def receive(self, cfg=None):
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
                      message=out["message"].decode(errors="replace"), ptx=out["ptx"],
                      kind=(cfg or {}).get("kind", "ptx"), log=out.get("log", b""))

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
    def __init__(self, status, hit=False, keyed=True, store_status=0, message="", ptx=b"",
                 kind="ptx", log=None):
        self.status, self.hit, self.keyed = status, hit, keyed
        self.store_status, self.message, self.ptx = store_status, message, ptx
        self.kind = kind  # what ptx holds: PTX, or a CUBIN or LTO-IR compared whole
        self.log = log    # the compile's log (None: the CLI, which does not say it)

    def ok(self):
        return self.status == 0

    def kernel(self):
        """The PTX without comment lines, or the binary whole: what a program runs."""
        if not self.ok():
            return None
        if self.kind != "ptx":
            return self.ptx
        return b"\n".join(l.rstrip() for l in self.ptx.split(b"\n")
                          if l.strip() and not l.lstrip().startswith(b"//"))

    def constants(self):
        """What the kernel stores, o[0], o[1], ..., for messages."""
        k = self.kernel()
        if k is None:
            return "compile failed: " + self.message[:160]
        if self.kind != "ptx":
            import hashlib
            return "%s of %d bytes, %s" % (self.kind, len(k), hashlib.blake2b(
                k, digest_size=6).hexdigest())
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
                           both_failed=0, classes={}, class_uncached={}, class_hits={})
        self.report = os.path.join(work, "dropin-report")
        self.bad_exits = []

    def env(self, aged, dropin=False, extra=None):
        env = dict(os.environ)
        for k in ("KCACHE_PATH", "KCACHE_DISABLE", "KCACHE_NVRTC_REAL", "LD_PRELOAD",
                  "KCACHE_REMOTE", "KCACHE_TEST_CLOCK_SHIFT_NS"):
            env.pop(k, None)
        env["KCACHE_DIR"] = self.cache
        env["KCACHE_COMPRESSION"] = ""
        if self.args.nvrtc_cache == "off":
            env["CUDA_CACHE_DISABLE"] = "1"
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
        env.update(extra or {})
        return env

    def driver(self, which, aged, extra=None):
        """One process per path, kind of files and environment NVRTC reads (read at load)."""
        extra = extra or {}
        key = (which, aged, tuple(sorted(extra.items())))
        if key not in self.drivers:
            env = self.env(aged, which == "dropin", extra)
            if which == "ref":
                # Written only if the drop-in were loaded: the reference must be NVIDIA's.
                env["KCACHE_NVRTC_REPORT"] = self.report + ".ref"
            self.drivers[key] = Driver(self.args.driver, env)
        return self.drivers[key]

    def close_env_drivers(self):
        """The processes of scenarios' own environments: each scenario makes new ones."""
        for key in [k for k in self.drivers if k[2]]:
            rc = self.drivers.pop(key).close()
            if rc:
                self.bad_exits.append("the %s driver (env %s) exited %d" % (key[0], key[2], rc))

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
                    json.dumps(cfg["mem"]), json.dumps(cfg.get("env")), cfg.get("kind"),
                    cfg.get("arch"), cfg.get("name"), cfg.get("arg"))
        if memo_key in self.ref_memo:
            return lambda: self.ref_memo[memo_key]
        self.counts["ref_compiles"] += 1
        d = self.driver("ref", False, process_env(sc, cfg, root))
        early = d.send("nvrtc", os.path.join(root, cfg["cwd"]), source_arg(cfg, root),
                       opts, cfg["mem"], cfg)

        def get():
            if memo_key not in self.ref_memo:
                self.ref_memo[memo_key] = early or d.receive(cfg)
            return self.ref_memo[memo_key]
        return get

    def cli(self, sc, cfg, root):
        out = os.path.join(self.work, "cli-out.ptx")
        if os.path.exists(out):
            os.unlink(out)
        kind = cfg.get("kind", "ptx")
        argv = [self.args.kcache, "compile", source_arg(cfg, root), "--arch", ARCH[0],
                "--" + kind, "-o", out, "--json", "-q"]
        rest = []
        for o in sc.options(cfg, root):
            # The CLI hands NVRTC its own -I and -D before what follows --: only the
            # leading ones are the CLI's, so that NVRTC gets every option in order.
            if o[:2] in ("-I", "-D") and len(o) > 2 and not rest:
                argv += [o[:2], o[2:]]
            elif not (kind == "ltoir" and o == "-dlto"):  # --ltoir says it
                rest.append(o)
        argv += ["--"] + rest if rest else []
        p = subprocess.run(argv, cwd=os.path.join(root, cfg["cwd"]),
                           env=self.env(sc.aged, extra=cfg.get("env")), capture_output=True)
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
        # The log where the scenario compares it (paths: a header's path in a warning).
        log = (item.get("log") or "").encode() if cfg.get("pathkind") else None
        return Result(status=0, hit=item["hit"], keyed=item["outcome"] != "uncached",
                      store_status=0 if item["cached"] else 1, message=msg, ptx=ptx, kind=kind,
                      log=log)

    def kcache(self, path, sc, cfg, root):
        if path == "cli":
            return self.cli(sc, cfg, root)
        mode = "lib" if path == "lib" else "nvrtc"
        return self.driver(path, sc.aged, process_env(sc, cfg, root)).compile(
            mode, os.path.join(root, cfg["cwd"]), source_arg(cfg, root),
            sc.options(cfg, root), cfg["mem"], cfg)

    def cold(self, sc, cfg, root):
        self.counts["cold_checks"] += 1
        return self.driver("lib", sc.aged, process_env(sc, cfg, root)).compile(
            "cold", os.path.join(root, cfg["cwd"]), source_arg(cfg, root),
            sc.options(cfg, root), cfg["mem"], cfg)

    def count_uncached(self, path, r, classes=()):
        if r.ok() and (not r.keyed or r.store_status):
            reason = r.message.split("(")[0].strip()[:90] or "no reason given"
            key = "%s: %s" % (path, reason)
            self.counts["uncached"][key] = self.counts["uncached"].get(key, 0) + 1
            for c in classes:
                self.counts["class_uncached"][c] = self.counts["class_uncached"].get(c, 0) + 1

    def run(self, sc, root, steps=None, paths=None, rng=None, real_sleep=False, log=None):
        """
        Builds sc's tree under root and runs its steps (a subset, for shrinking).
        Returns the failures, at most one per path (a path that failed is not run
        again: its cache no longer says anything); log(row) gets one row per step.
        """
        cfg = json.loads(json.dumps(sc.cfg))
        cfg["incs"] = [i.replace("{R}", root) for i in cfg["incs"]]
        if cfg.get("name"):
            cfg["name"] = cfg["name"].replace("{R}", root)
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
                elif op[0] == "set" and isinstance(op[2], list):
                    cfg[op[1]] = [v.replace("{R}", root) if isinstance(v, str) else v
                                  for v in op[2]]
                elif op[0] == "set":
                    cfg[op[1]] = op[2]
                else:
                    apply_op(root, op, baseline)
            if real_sleep:
                time.sleep(2.2)
            pending = self.reference(sc, cfg, root)
            self.counts["steps"] += 1
            classes = step_classes(cfg, root)
            for c in classes:
                self.counts["classes"][c] = self.counts["classes"].get(c, 0) + 1
            now = [p for p in live if p != "cli" or cli_takes(cfg)]
            if self.args.rotate and n > 0 and now:
                now = [now[(n + sc.seed) % len(now)]]
            got = {path: self.kcache(path, sc, cfg, root) for path in now}
            ref = pending()
            row = {"step": n, "ref": ref.constants(), "paths": {}}
            for path in list(now):
                r = got[path]
                self.counts["compiles"][path] += 1
                self.counts["hits"][path] += r.hit
                if path != "dropin":  # the drop-in's reasons come from its report
                    self.count_uncached(path, r, classes)
                    for c in classes if r.hit else ():
                        self.counts["class_hits"][c] = self.counts["class_hits"].get(c, 0) + 1
                row["paths"][path] = (r.hit, r.constants())
                verdict = compare(ref, r)
                if verdict is None and path != "dropin" and r.hit and \
                        rng.random() < self.args.cold_rate:
                    # kcache against kcache: byte for byte, comments included.
                    cold = self.cold(sc, cfg, root)
                    if cold.ok() and cold.ptx != r.ptx:
                        verdict = "warm-differs-from-empty-cache"
                if verdict is None and cfg.get("pathkind") and ref.ok() and r.ok() and \
                        ref.ptx != r.ptx:
                    verdict = "different-bytes"  # a header's path: anywhere in the output
                if verdict is None and ref.ok() and r.ok() and log_differs(path, cfg, ref, r):
                    # The log is the program's too ("NAME(LINE): warning ..."): a hit
                    # made under another name must not bring that name's log.
                    verdict = "different-log"
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
                if verdict == "different-kernel" and path != "dropin" and not r.hit and \
                        cfg.get("name") and "without the cache" in (r.message or ""):
                    # kcache compiled as NVRTC reading the disk does, uncached: the
                    # program named by its path, where a cached compile names it as
                    # the request does (cfg["name"]). LTO-IR and line information
                    # hold that name: the reference for it is NVRTC given the path.
                    by_path = self.reference(sc, dict(cfg, name=None), root)()
                    if compare(by_path, r) is None:
                        self.counts["uncached_by_path"] = self.counts.get(
                            "uncached_by_path", 0) + 1
                        continue
                why = verdict
                if path == "dropin" and verdict == "different-kernel":
                    # A miss is NVIDIA's NVRTC on this very disk: only a hit should
                    # differ. A miss that differs means NVRTC's answer is not a function
                    # of what the reference gives it (its own cache, see --nvrtc-cache).
                    why = "stale-hit" if r.hit else "dropin-miss-differs"
                elif verdict == "different-kernel":
                    cold = self.cold(sc, cfg, root)
                    why = ("stale-hit" if r.hit else "stale") if compare(ref, cold) is None \
                        else "differs-even-uncached"
                detail = ""
                if cfg.get("pathkind"):
                    if other_place(cfg, root, r):
                        why += "-with-the-other-place's-path"
                    detail = first_difference(ref, r, root)
                live.remove(path)
                failures.append(dict(step=n, path=path, why=why, ref=ref.constants(),
                                     got=r.constants(), hit=r.hit, message=r.message,
                                     classes=classes, detail=detail))
            if log:
                log(row)
        self.close_env_drivers()
        return failures


def process_env(sc, cfg, root):
    """The environment of the driver a request goes to (None: the long-lived ones).

    NVIDIA's NVRTC keeps -restrict for the rest of a process once a compile asked
    for it (tests/soundness/test_restrict.py): a request with -restrict goes to
    processes of the scenario's own, closed at its end, so that the long-lived
    drivers, the reference among them, stay as a fresh process is."""
    env = cfg.get("env")
    opts = sc.options(cfg, root)
    if "-restrict" in opts or "--restrict" in opts:
        env = dict(env or {}, KCACHE_SOUND_RESTRICT="1")
    return env


def source_arg(cfg, root):
    """The source as the driver and the CLI are given it: cfg["arg"] (relative to the
    working directory, or "{R}/..."), else the file's absolute path."""
    if cfg.get("arg"):
        return cfg["arg"].replace("{R}", root)
    return os.path.join(root, cfg["source"])


def cli_takes(cfg):
    """Whether `kcache compile` can be asked for what NVRTC is (paths): it names a
    program by its base name but searches beside the file as spelled, so only a
    program named without a directory has one NVRTC to compare with."""
    return not cfg.get("pathkind") or "/" not in cfg["name"]


def text_lines(b):
    """Output as lines of text, a PTX string (a .b8 array of numbers) as the string."""
    out = []
    for line in b.decode(errors="replace").split("\n"):
        if ".b8" in line and "= {" in line:
            nums = line.split("= {")[1].split("}")[0].split(",")
            line = "%s \"%s\"" % (line.split("[")[0].strip(), "".join(
                chr(int(x)) for x in nums if x.strip().isdigit() and int(x)))
        out.append(line.strip())
    return out


def other_place(cfg, root, r):
    """Whether r (paths) holds the path of the tree's other place: a hit made there."""
    other = os.path.join(root, "B" if cfg["pinfo"]["place"] == "A" else "A") + "/"
    text = text_lines(r.ptx) if r.kind == "ptx" else [r.ptx.decode(errors="replace")]
    return any(other in line for line in text + text_lines(r.log or b""))


def first_difference(ref, r, root):
    """The first line of the PTX, else of the log, where r is not NVRTC's, strings
    shown as text, the tree's root as {R}."""
    def lines(b):
        return [line.replace(root, "{R}") for line in text_lines(b)]
    strings = (lambda b: [x for x in lines(b) if x.startswith(".global") and '"' in x])
    for what, a, b in (("PTX", ref.ptx, r.ptx), ("log", ref.log or b"", r.log or b"")):
        if r.kind != "ptx" and what == "PTX":
            continue
        la, lb = lines(a), lines(b)
        if what == "PTX" and strings(a) != strings(b):  # a path, most often
            la, lb = strings(a), strings(b)
        for x, y in zip(la + [""] * len(lb), lb + [""] * len(la)):
            if x != y:
                return "%s: NVRTC %r, kcache %r" % (what, x[:150], y[:150])
    return ""


def make_root(sc, work, name):
    """Where a scenario's tree goes: under work, or under /dev/shm when it asks (and can)."""
    if sc.cfg.get("root") == "shm" and os.access("/dev/shm", os.W_OK):
        return tempfile.mkdtemp(prefix="kcache-sound-", dir="/dev/shm")
    root = os.path.join(work, name)
    os.makedirs(root)
    return root


def fix(op, root):
    """An op with "{R}" (the scenario's root) filled in."""
    return tuple(v.replace("{R}", root) if isinstance(v, str) else v for v in op)


def log_differs(path, cfg, ref, r):
    """Whether r's log is not NVRTC's. The drop-in's must be NVRTC's byte for byte, and
    so must every path's in the paths kind (headers' paths are its subject). The
    library's is compared where the program has a name of the request's own (else
    NVRTC reading the disk names it by its path) and where the log names no header:
    its hermetic compile names headers by include spelling (doc/design.md)."""
    if r.log is None or ref.log is None:
        return False
    if path == "dropin" or cfg.get("pathkind"):
        return ref.log != r.log
    if path == "lib" and cfg.get("name") and b".h" not in ref.log and \
            "without the cache" not in (r.message or ""):
        return ref.log != r.log
    return False


def compare(ref, r):
    """None when r is what NVRTC gives; else why not."""
    if ref.ok() and r.ok():
        return None if ref.kernel() == r.kernel() else "different-kernel"
    if ref.ok():
        return "kcache-failed-where-nvrtc-passed"
    if r.ok():
        return "kernel-where-nvrtc-fails"
    return None


# ---- shrinking (the repro script it ends with: repro.py) ------------------------------------

def replay(args, sc, steps, path, why):
    """Runs sc alone (fresh cache, fresh processes); the failure if it is (path, why) again."""
    work = tempfile.mkdtemp(prefix="kcache sound-replay-", dir=args.tmp)
    runner = Runner(args, work)
    try:
        root = make_root(sc, work, "tree")
        for f in runner.run(sc, root, steps=steps, paths=[path]):
            if f["why"] == why:
                return f
        return None
    finally:
        runner.close()
        shutil.rmtree(root, ignore_errors=True)
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
                w = line.partition(" nvrtc-path ")[0].split()  # the path last: it may hold spaces
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
    ap.add_argument("--nvrtc-cache", choices=["on", "off"], default="on",
                    help="NVIDIA's NVRTC's own cache (CUDA 13, where a driver is loaded): "
                         "off sets CUDA_CACHE_DISABLE=1 for every process")
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
    first = [] if args.long or args.kind or args.scenario or args.steps else list(NEW_KINDS)
    try:
        while (args.scenarios is None or n < args.scenarios) and \
                (args.scenarios is not None or n < len(first) or
                 (runner.counts["steps"] < args.steps if args.steps else
                  time.time() - t0 < budget)):
            sc_seed = rng.randint(1, 2**31)
            kind, aged = args.kind, None if args.files == "mixed" else args.files == "aged"
            if args.scenario:
                kind, sc_seed, how = (args.scenario.split(":") + ["aged"])[:3]
                sc_seed, aged = int(sc_seed), how == "aged"
            sc = make_scenario(sc_seed, kind, aged)
            if n < len(first):
                # Issue 32's kinds, once each first (few steps) in the bounded run.
                sc = make_scenario(sc_seed, first[n], aged)
                sc.steps = sc.steps[:2]
            root = make_root(sc, work, "t%d" % n)
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
                      "kcache %s (%s)%s%s; classes: %s" % (
                          sc.kind, sc_seed, "aged" if sc.aged else "fresh", f["step"],
                          f["path"], f["why"], f["ref"], f["got"], "hit" if f["hit"] else "miss",
                          " (" + f["message"][:160] + ")" if f["message"] else "",
                          "; first difference: " + f["detail"] if f.get("detail") else "",
                          ", ".join(f["classes"]) or "none"))
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
    print("  steps per class (uncached compiles and hits of the CLI and library among them):")
    for k, v in sorted(c["classes"].items()):
        print("    %5d  %-28s %d uncached, %d hits" % (v, k, c["class_uncached"].get(k, 0),
                                                     c["class_hits"].get(k, 0)))
    print("  results that differed from NVRTC: %d" % c["differ"])
    print("  same kernel as NVRTC's but other bytes (comment lines): %d"
          % c.get("raw_differs", 0))
    print("  uncached compiles that match NVRTC given the file's path (not the request's "
          "name): %d" % c.get("uncached_by_path", 0))
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

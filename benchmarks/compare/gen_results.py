#!/usr/bin/env python3
"""Writes benchmarks/RESULTS.md and its plots from the JSON the comparison
run left (driver.py), plus the GPU benchmark's JSON (benchmarks/gpu/*.json)
when one is there. Every figure on the page comes from those files.

    gen_results.py --in DIR --out RESULTS.md --plots DIR [--gpu-dir DIR]
"""
import argparse
import glob
import json
import math
import os

KC = "kcache"
FPE = "file-per-entry"
KCB = "kcache batched"
CC = "cuda.core"
FLOOR = "floor"
FLOOR_LZ4 = "floor lz4"
BINS = ["4-8 KiB", "8-32 KiB", "32-128 KiB", "128-512 KiB", "512-1024 KiB"]


class Data:
    def __init__(self, files):
        self.recs = []
        self.meta = {}
        for name, d in files.items():
            self.meta[name] = {k: v for k, v in d.items() if k != "records"}
            self.recs += d.get("records", [])

    def get(self, group, system, case, metric):
        for r in self.recs:
            if (r["group"], r["system"], r["case"], r["metric"]) == (group, system, case, metric):
                return r["value"]
        return None

    def cases(self, group, system=None):
        seen = []
        for r in self.recs:
            if r["group"] == group and (system is None or r["system"] == system):
                if r["case"] not in seen:
                    seen.append(r["case"])
        return seen


def kc_settings(d):
    """kcache's systems, one per `compression` setting: [(system, setting, is_default)],
    the default first (cmp_store.c records which is which)."""
    found = [(r["system"], r["metric"], bool(r["value"])) for r in d.recs
             if r["group"] == "meta" and r["case"] == "compression"]
    if not found:  # a run from before the record: cmp_store.c's names then
        found = [(s, c, s == KC) for s, c in ((KC, "zstd"), ("kcache lz4", "lz4"),
                                              ("kcache none", "none"))]
    found = [f for f in found if any(r["system"] == f[0] and r["group"] == "hit_warm"
                                     for r in d.recs)]
    return sorted(found, key=lambda f: not f[2])


def fmt(v, unit=""):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if unit == "B":
        for u, s in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if abs(v) >= s:
                return f"{v / s:.1f} {u}"
        return f"{v:.0f} B"
    if float(v).is_integer() and unit == "":
        return f"{int(v):,}"
    if abs(v) >= 100:
        s = f"{v:,.0f}"
    elif abs(v) >= 10:
        s = f"{v:.1f}"
    else:
        s = f"{v:.2f}"
    return s + (f" {unit}" if unit else "")


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def rfmt(r):
    return "–" if r is None else f"{r:.2f}×"


class Behind:
    """Every comparison where kcache does worse than an alternative, grouped
    by what was compared and against whom. Differences under TIE are ties."""

    TIE = 0.02

    def __init__(self):
        self.groups = {}
        self.order = []
        self.reasons = []  # (prefix of `what`, text): why kcache is behind there

    def reason(self, what_prefix, text):
        """Why the rows whose `what` starts with what_prefix are behind, and
        what that buys: written from figures of the same run, never typed."""
        if text:
            self.reasons.append((what_prefix, text))

    def check(self, what, kc, alt, alt_name, lower_is_better=True, unit="", detail=""):
        if kc is None or alt is None or alt == 0 or kc == 0:
            return
        r = kc / alt if lower_is_better else alt / kc
        if r <= 1 + self.TIE:
            return
        key = (what, alt_name)
        if key not in self.groups:
            self.groups[key] = []
            self.order.append(key)
        word = "slower" if unit in ("us", "ms", "s") else "larger" if unit == "B" else "lower"
        self.groups[key].append((detail, r, word, fmt(kc, unit), fmt(alt, unit)))

    def lines(self):
        out = []
        for what, alt in self.order:
            items = self.groups[(what, alt)]
            word = items[0][2]
            if len(items) == 1 and not items[0][0]:
                _, r, _, k, o = items[0]
                out.append(f"{what}, against {alt}: kcache {k} vs {o}, {r:.2f}× {word}")
                continue
            det = "; ".join(f"{d} {r:.2f}× ({k} vs {o})" for d, r, _, k, o in items)
            out.append(f"{what}, against {alt} ({word}): {det}")
        return out

    def why(self):
        """The reasons for the groups that are behind in this run, once each."""
        out = []
        for prefix, text in self.reasons:
            if any(what.startswith(prefix) for what, _ in self.order):
                out.append(f"**{prefix}**: {text}")
        return out


def table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        out.append("| " + " | ".join(str(x) for x in r) + " |")
    return "\n".join(out) + "\n"


def kc_floor(d):
    """The floor of the default setting's codec: what "kcache" (the default) is compared to."""
    kcs = kc_settings(d)
    return FLOOR_LZ4 if kcs and kcs[0][1] == "lz4" else FLOOR


def plot(d, plots_dir, rel):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    made = []
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    styles = {KC: ("tab:blue", "o"), FPE: ("tab:orange", "s"), CC: ("tab:green", "^"),
              kc_floor(d): ("black", "x")}
    for ax, group, title in ((axes[0], "hit_warm", "warm page cache, handle open"),
                             (axes[1], "hit_cold", "cold: pages dropped, open + get + close")):
        for sysname, (col, mk) in styles.items():
            xs, med, p99 = [], [], []
            for b in BINS:
                size = d.get("hit_warm", sysname, b, "size") or d.get("hit_warm", KC, b, "size")
                m = d.get(group, sysname, b, "median_us")
                if size and m:
                    xs.append(size / 1024)
                    med.append(m)
                    p99.append(d.get(group, sysname, b, "p99_us"))
            if xs:
                ax.plot(xs, med, marker=mk, color=col, label=f"{sysname} median")
                ax.plot(xs, p99, marker=mk, color=col, linestyle=":", alpha=0.6,
                        label=f"{sysname} p99")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("artifact size (KiB, median of the size bin)")
        ax.set_ylabel("hit latency (µs)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    p = os.path.join(plots_dir, "hit_latency.png")
    fig.savefig(p, dpi=110)
    plt.close(fig)
    made.append(("Hit latency against artifact size", rel + "hit_latency.png"))

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for sysname, (col, mk) in styles.items():
        pts = sorted((float(c), d.get("cap_series", sysname, c, "disk_over_cap"))
                     for c in d.cases("cap_series", sysname))
        if pts:
            ax.plot([x for x, _ in pts], [y for _, y in pts], marker=mk, markersize=3,
                    color=col, label=f"{sysname}: all on disk")
        pts = sorted((float(c), d.get("cap_series", sysname, c, "files_over_cap"))
                     for c in d.cases("cap_series", sysname)
                     if d.get("cap_series", sysname, c, "files_over_cap") is not None)
        if pts:
            ax.plot([x for x, _ in pts], [y for _, y in pts], linestyle="--", color=col,
                    label=f"{sysname}: entry files only")
    ax.axhline(1.0, color="red", linewidth=1, label="the cap")
    ax.set_xlabel("raw bytes written / cap")
    ax.set_ylabel("bytes on disk / cap")
    ax.set_title("Writing past a size cap")
    ax.legend(fontsize=7)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(plots_dir, "size_cap.png"), dpi=110)
    plt.close(fig)
    made.append(("On-disk size while writing past the cap", rel + "size_cap.png"))
    return made


SQF = "sqlite floor"


def first_hit_reason(d, behind):
    """Why a process's first hit and a cold hit cost kcache more than a file:
    the SQLite floor (one table, key -> bytes, nothing else) and the pages read."""
    parts, cold = [], []
    for b in BINS:
        k, f, q = (d.get("hit_open", s, b, "median_us") for s in (KC, FPE, SQF))
        if k and f and q:
            parts.append(f"{b}: kcache {fmt(k, 'us')}, the SQLite floor {fmt(q, 'us')}, "
                         f"file-per-entry {fmt(f, 'us')}")
        kc, fc, qc = (d.get("hit_cold", s, b, "median_us") for s in (KC, FPE, SQF))
        kr, fr, qr = (d.get("hit_cold", s, b, "disk_read_kib_median") for s in (KC, FPE, SQF))
        if kc and fc and qc and kr is not None and fr is not None and qr is not None:
            cold.append(f"{b}: kcache {fmt(kc, 'us')} reading {fmt(kr)} KiB from the disk, the "
                        f"SQLite floor {fmt(qc, 'us')} ({fmt(qr)} KiB), file-per-entry "
                        f"{fmt(fc, 'us')} ({fmt(fr)} KiB)")
    if parts:
        behind.reason("Store hit, one get per fresh handle",
                      "a fresh process must open the SQLite file: map and rebuild the WAL index, "
                      "parse the schema, prepare the lookup, and at close record the hit in a "
                      "write transaction. The SQLite floor measured beside it (one table from key "
                      "to raw bytes, no checks, no decoding, no counters: the least any "
                      "one-SQLite-file design pays) is itself several times a file's open and "
                      "read, so no SQLite cache meets a file-per-entry cache here; what kcache "
                      "adds over that floor is its schema (every table, index and trigger is parsed "
                      "by each open), the "
                      "decoding and digest, and the recorded hit. Measured: " +
                      "; ".join(parts) + ". It buys one file instead of one per entry (see disk), "
                      "a size cap that holds, and writes that are atomic across processes.")
    if cold:
        behind.reason("Store hit, cold",
                      "from a cold page cache every b-tree page on the way is a disk read: the "
                      "schema, the WAL, the key index, the entry, its info and its artifact "
                      "rows, where a file-per-entry hit reads one file. Measured: " +
                      "; ".join(cold) + ".")


def load_gpu(gpu_dir):
    found = []
    for p in sorted(glob.glob(os.path.join(gpu_dir, "**", "*.json"), recursive=True)):
        try:
            j = json.load(open(p))
        except (OSError, ValueError):
            continue
        if isinstance(j, dict) and str(j.get("benchmark", "")).startswith("gpu"):
            found.append((p, j))
    return found


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--in", dest="indir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--plots", required=True)
    ap.add_argument("--plots-rel", default="compare/")
    ap.add_argument("--gpu-dir")
    ap.add_argument("--command", default="benchmarks/compare/run --quick")
    a = ap.parse_args()

    files = {}
    for name in ("compile", "cudacore-compile", "store", "cudacore-store", "ccache", "e2e",
                 "machine"):
        p = os.path.join(a.indir, name + ".json")
        if os.path.exists(p):
            files[name] = json.load(open(p))
    d = Data({k: v for k, v in files.items() if k != "machine"})
    m = files.get("machine", {})
    cc_meta = files.get("cudacore-store") or files.get("cudacore-compile") or {}
    cc_ok = cc_meta.get("available", False)
    cc_ver = cc_meta.get("version", "not installed")
    behind = Behind()
    md = []
    w = md.append

    w("# kcache against the alternatives\n")
    w(f"Generated by `{a.command}` ({m.get('mode', '?')} mode, {m.get('time', '?')}, "
      f"{m.get('wall_seconds', '?')} s) from the JSON the run wrote; nothing on this page is "
      "typed by hand. Every ratio compares figures measured in the same run, interleaved where "
      "the systems could be. See `benchmarks/README.md` for how each figure is taken.\n")
    w("> **Noise.** This machine is shared: "
      f"{m.get('cpus', '?')} CPUs and other engineers' builds and tests ran at the same time "
      f"(load average {' '.join(m.get('loadavg_start', []))} at the start, "
      f"{' '.join(m.get('loadavg_end', []))} at the end). Medians are robust to that; p99 and "
      "throughput figures are not, and multi-process throughput cannot scale past the CPUs. "
      "Read ratios, not absolute times.\n")

    w("## Machine and versions\n")
    w(table(["", ""], [
        ["CPU", f"{m.get('cpu_model', '?')}, {m.get('cpus', '?')} CPUs"],
        ["kernel / OS", f"{m.get('kernel', '?')} / {m.get('os', '?')}"],
        ["file system of the work dir", m.get("filesystem", "?")],
        ["kcache", m.get("kcache", "?")],
        ["NVRTC", f"{d.get('meta', 'nvrtc', 'version', 'major'):.0f}."
                  f"{d.get('meta', 'nvrtc', 'version', 'minor'):.0f}"
         if d.get("meta", "nvrtc", "version", "major") is not None else "?"],
        ["nvcc", m.get("nvcc", "?")],
        ["SQLite (kcache links)", m.get("sqlite", "?")],
        ["zstd (kcache links)", m.get("zstd", "?")],
        ["ccache", m.get("ccache", "?")],
        ["cuda-core / cuda-bindings",
         f"{cc_ver} / {cc_meta.get('cuda_bindings', '?')}" if cc_ok
         else f"NOT AVAILABLE: {cc_meta.get('reason', 'not run')}"],
        ["Python", m.get("python", "?")],
    ]))

    w("## The systems\n")
    w(table(["system", "what runs"], [
        ["**kcache**", f"this library: one SQLite file, artifacts stored with its default "
                       f"`compression` ({kc_settings(d)[0][1] if kc_settings(d) else '?'}), "
                       "XXH3-128 of the stored bytes checked on every hit; compile-level hits "
                       "resolve and hash every header"],
        ["NVRTC (no cache)", "NVRTC called directly through `dlopen` of libnvrtc.so.13: what "
                             "every run costs without a cache"],
        ["kcache no-cache", "`kcache_compile` with `KCACHE_COMPILE_NO_CACHE`: NVRTC plus kcache's "
                            "header resolution"],
        ["file-per-entry", "`benchmarks/compare/fpe.c`: the design of CuPy's, Triton's and "
                           "cuda.core's caches in C: one file per key under a 2-level fan-out, "
                           "temp file + atomic rename (no fsync), a BLAKE2b content hash checked "
                           "on read, atime bumped on a hit, LRU eviction to a cap by scanning the "
                           "directory (sorted by atime) when the running total passes it. Raw "
                           "bytes, no compression. Compile-level key: source, options, name "
                           "expressions, NVRTC version (as CuPy's; headers not hashed)"],
        ["cuda.core", f"`cuda.core.utils.FileStreamProgramCache` from cuda-core {cc_ver} "
                      "through Python: one file per key (sha256 of the key, 1-level fan-out), "
                      "fsync + `os.replace`, raw bytes, no content check, atime LRU cap"],
        ["ccache", "Debian's ccache in front of `nvcc -c`"],
        ["floor", "the bytes kcache stores with zstd, as a zstd frame in a plain file: "
                  "`open`+`read`+`ZSTD_decompress` (checksum checked)"],
        [", ".join(s for s, _, df in kc_settings(d) if not df) or "–",
         "kcache with its other `compression` settings (lz4: LZ4 blocks; zstd: level-3 "
         "frames; none: raw bytes), each in a database of its own filled with the same "
         "entries; see \"Each `compression` setting\""],
        ["floor lz4", "the LZ4 block kcache stores, in a plain file: `open`+`read`+"
                      "`LZ4_decompress_safe` (no check: kcache adds the stored bytes' XXH3)"],
        ["CuPy", "measured on the GPU machine, see \"On the GPU machine\" below"],
        ["NVRTC's own cache", "NVRTC 12.9+'s cache in the driver's ComputeCache: measured on the GPU "
         "machine (it needs a driver), see \"On the GPU machine\" below"],
    ]))

    # ---- headline -------------------------------------------------------
    head = []
    mid = "32-128 KiB"
    kfl = kc_floor(d)
    kcw, flw, few, ccw = (d.get("hit_warm", s, mid, "median_us") for s in (KC, kfl, FPE, CC))
    if kcw:
        head.append(f"Warm hit, {mid} artifacts (median): kcache {fmt(kcw, 'us')} = "
                    f"{rfmt(ratio(kcw, flw))} the floor, {rfmt(ratio(kcw, few))} the "
                    f"file-per-entry cache" + (f", {rfmt(ratio(kcw, ccw))} cuda.core" if ccw else ""))
    bs_nv = d.get("compile", "nvrtc", "block_sort", "median_ms")
    bs_hit = d.get("compile", KC, "block_sort", "hit_median_us")
    if bs_nv and bs_hit:
        head.append(f"block_sort.cu: NVRTC {fmt(bs_nv, 'ms')} against a kcache hit "
                    f"{fmt(bs_hit, 'us')}: {bs_nv * 1e3 / bs_hit:,.0f}× faster than no cache")
    e_k = d.get("e2e", "kcache compile", "block_sort", "median_ms")
    e_c = d.get("e2e", "ccache nvcc -c", "block_sort", "median_ms")
    e_p = d.get("e2e", "cuda.core (python)", "block_sort", "median_ms")
    if e_k:
        head.append(f"Whole-process hit, block_sort.cu: `kcache compile` {fmt(e_k, 'ms')}, "
                    f"`ccache nvcc -c` {fmt(e_c, 'ms')} ({rfmt(ratio(e_k, e_c))}), a Python "
                    f"process with cuda.core {fmt(e_p, 'ms')} ({rfmt(ratio(e_k, e_p))})")
    dk = d.get("disk", KC, "all", "allocated_bytes")
    df = d.get("disk", FPE, "all", "allocated_bytes")
    dc = d.get("disk", CC, "all", "allocated_bytes")
    if dk:
        head.append(f"Disk for the synthetic set: kcache {fmt(dk, 'B')}, file-per-entry "
                    f"{fmt(df, 'B')} ({rfmt(ratio(df, dk))} kcache's), cuda.core {fmt(dc, 'B')} "
                    f"({rfmt(ratio(dc, dk))})")
    ek, ef, ec = (d.get("cap", s, "end", "entries") for s in (KC, FPE, CC))
    if ek:
        head.append(f"Under the same size cap ({fmt(d.get('cap', '-', 'cap', 'bytes'), 'B')}) "
                    f"kcache kept {fmt(ek)} entries, the file-per-entry cache {fmt(ef)}, "
                    f"cuda.core {fmt(ec)}; kcache's files stayed at "
                    f"{fmt(d.get('cap', KC, 'max', 'disk_over_cap'))}× the cap at most, the "
                    f"others reached {fmt(d.get('cap', FPE, 'max', 'disk_over_cap'))}× and "
                    f"{fmt(d.get('cap', CC, 'max', 'disk_over_cap'))}× counting their directories")
    ho_k, ho_f, ho_o = (d.get("hit_open", s, mid, v) for s, v in
                        ((KC, "median_us"), (FPE, "median_us"), (KC, "open_median_us")))
    if ho_k:
        head.append(f"But a process's first store hit ({mid}, fresh handle, warm page cache) "
                    f"costs kcache {fmt(ho_k, 'us')} (median; open "
                    f"{fmt(ho_o, 'us')}, get {fmt(d.get('hit_open', KC, mid, 'get_median_us'), 'us')}"
                    f", close {fmt(d.get('hit_open', KC, mid, 'close_median_us'), 'us')}, which "
                    "writes the hit it recorded; "
                    f"{fmt(d.get('hit_open', KC, mid, 'no_touch_median_us'), 'us')} in all with "
                    "`KCACHE_GET_NO_TOUCH`), against "
                    f"{fmt(ho_f, 'us')} for the file-per-entry cache ({rfmt(ratio(ho_k, ho_f))}) "
                    f"and {fmt(d.get('hit_open', CC, mid, 'median_us'), 'us')} for cuda.core")
    w("## Headline\n")
    for h in head:
        w(f"- {h}")
    w("\n(Each ratio is kcache's figure over the other system's unless worded otherwise; "
      "below 1× kcache is faster or smaller.)\n")

    # ---- hit latency ------------------------------------------------------
    n = d.get("dataset", "-", "entries", "count")
    w("## Hit latency by artifact size (store level)\n")
    w(f"{fmt(n)} distinct entries, sizes log-normal around a median of "
      f"{fmt(d.get('dataset', '-', 'entries', 'median_size'), 'B')} (4 KiB to 1 MiB, p99 "
      f"{fmt(d.get('dataset', '-', 'entries', 'p99_size'), 'B')}), "
      f"{fmt(d.get('dataset', '-', 'entries', 'raw_bytes'), 'B')} raw. The bytes are sm_90 "
      "instruction words of the corpus CUBINs in random order: zstd level 3 (what kcache writes with zstd) compresses them "
      f"{fmt(d.get('dataset', '-', 'synthetic', 'zstd_ratio'))}× (the corpus CUBINs "
      f"together: {fmt(d.get('dataset', '-', 'real CUBINs', 'zstd_ratio'))}×). 16 entries are "
      "sampled per size bin; every system reads the same entries, interleaved in rotating "
      "order. Bytes are compared after each get (not timed).\n")
    for group, title, note in (
            ("hit_warm", "Warm (page cache), handle already open",
             "kcache: `kcache_store_get` + `kcache_entry_free` on an open store; file-per-entry: "
             "`fpe_get`; cuda.core: `cache[key]` on an open `FileStreamProgramCache`; floor: "
             "open + read + decode of the default setting's codec."),
            ("hit_open", "One get per fresh handle (a process's first hit), warm page cache",
             "Open the cache, get one entry, close. kcache's open, get and close are also "
             "shown apart."),
            ("hit_cold", "Cold: files dropped from the page cache, then open + get + close",
             "Everything is synced, then before each get the files it will read are dropped "
             "with `posix_fadvise(POSIX_FADV_DONTNEED)` (no root needed): kcache's database and "
             "WAL, the entry's file for the file-per-entry cache and cuda.core, the frame for "
             "the floor. The disk is a virtual disk: the host may still cache it.")):
        w(f"### {title}\n\n{note}\n")
        rows = []
        for b in BINS:
            size = d.get("hit_warm", KC, b, "size")
            vals = {s: (d.get(group, s, b, "median_us"), d.get(group, s, b, "p99_us"))
                    for s in (kfl, KC, FPE, CC)}
            if vals[KC][0] is None:
                continue
            row = [b, fmt(size, "B")]
            for s in (kfl, KC, FPE, CC):
                row.append(f"{fmt(vals[s][0])} / {fmt(vals[s][1])}")
            row += [rfmt(ratio(vals[KC][0], vals[kfl][0])),
                    rfmt(ratio(vals[KC][0], vals[FPE][0])), rfmt(ratio(vals[KC][0], vals[CC][0]))]
            if group in ("hit_open", "hit_cold"):
                row.append(f"{fmt(d.get(group, SQF, b, 'median_us'))} / "
                           f"{fmt(d.get(group, SQF, b, 'p99_us'))}")
            if group == "hit_cold":
                row.append(" / ".join(fmt(d.get(group, s, b, "disk_read_kib_median"))
                                      for s in (KC, FPE, SQF)))
            if group == "hit_open":
                row.append(" / ".join(fmt(d.get(group, KC, b, f"{x}_median_us"))
                                      for x in ("open", "get", "close")))
                row.append(f"{fmt(d.get(group, KC, b, 'no_touch_median_us'))} "
                           f"(close {fmt(d.get(group, KC, b, 'no_touch_close_median_us'))})")
            rows.append(row)
            for s, nm in ((FPE, "the file-per-entry cache"), (CC, "cuda.core")):
                behind.check(f"Store hit, {title.lower()}: median", vals[KC][0], vals[s][0],
                             nm, unit="us", detail=b)
                behind.check(f"Store hit, {title.lower()}: p99", vals[KC][1], vals[s][1], nm,
                             unit="us", detail=b)
        h = ["size bin", "median size", f"{kfl} µs (median / p99)", "kcache µs", "file-per-entry µs",
             "cuda.core µs", f"kcache / {kfl}", "kcache / file-per-entry", "kcache / cuda.core"]
        if group in ("hit_open", "hit_cold"):
            h.append("SQLite floor µs (median / p99)")
        if group == "hit_cold":
            h.append("KiB read from disk: kcache / file-per-entry / SQLite floor (medians)")
        if group == "hit_open":
            h.append("kcache open / get / close µs (medians)")
            h.append("kcache with `KCACHE_GET_NO_TOUCH`: total µs (close)")
        w(table(h, rows))
    first_hit_reason(d, behind)
    if os.path.exists(os.path.join(a.plots, "hit_latency.png")) or True:
        w("![hit latency against artifact size](compare/hit_latency.png)\n")

    # ---- compression settings ---------------------------------------------
    kcs = kc_settings(d)
    if len(kcs) > 1:
        lab = {s: f"kcache {c}" + (" (default)" if df else "") for s, c, df in kcs}
        w("## Each `compression` setting\n")
        w("The same entries in one database per setting (`compression = lz4`, `zstd`, `none`), "
          "read in the same interleaved loops as the tables above (the \"kcache\" rows there are "
          "the default). A hit checks the XXH3-128 of the *stored* bytes before decoding, so "
          "`none` hashes the most bytes and reads the most pages. "
          "\"fastest peer\" is the faster of the file-per-entry cache and cuda.core in that row; "
          "the ratios are each setting's median over it (below 1×: kcache is faster).\n")
        for group, title in (("hit_warm", "Warm hit, handle open"),
                             ("hit_open", "A process's first hit (open + get + close), warm "
                                          "page cache"),
                             ("hit_cold", "Cold page cache (open + get + close)")):
            rows = []
            for b in BINS:
                if d.get(group, kcs[0][0], b, "median_us") is None:
                    continue
                row = [b]
                for s, _, _ in kcs:
                    row.append(f"{fmt(d.get(group, s, b, 'median_us'))} / "
                               f"{fmt(d.get(group, s, b, 'p99_us'))}")
                for fl in (FLOOR, FLOOR_LZ4):
                    row.append(fmt(d.get(group, fl, b, "median_us")))
                peers = [(d.get(group, p, b, "median_us"), p) for p in (FPE, CC)]
                peers = [x for x in peers if x[0]]
                best = min(peers) if peers else (None, "")
                row.append(f"{fmt(best[0])} ({best[1]})" if best[0] else "–")
                for s, _, _ in kcs:
                    row.append(rfmt(ratio(d.get(group, s, b, "median_us"), best[0])))
                if group == "hit_open":
                    row.append(" / ".join(fmt(d.get(group, s, b, "get_median_us"))
                                          for s, _, _ in kcs))
                rows.append(row)
            h = (["size bin"] + [f"{lab[s]} µs (median / p99)" for s, _, _ in kcs] +
                 ["floor (zstd) µs", "floor lz4 µs", "fastest peer µs"] +
                 [f"{lab[s]} / fastest peer" for s, _, _ in kcs])
            if group == "hit_open":
                h.append("get alone µs: " + " / ".join(c for _, c, _ in kcs))
            w(f"### {title}\n")
            w(table(h, rows))
        w("### Writes, read throughput and disk\n")
        raw_b = d.get("dataset", "-", "entries", "raw_bytes")
        rows = []
        for s, c, df in kcs:
            al = d.get("disk", s, "all", "allocated_bytes")
            rows.append([lab[s], fmt(d.get("populate", s, "all", "puts_per_s")),
                         f"{fmt(d.get('throughput', s, '1 proc', 'gets_per_s'))} "
                         f"({fmt(d.get('throughput', s, '1 proc', 'MB_per_s'))} MB/s)",
                         fmt(al, "B"), rfmt(ratio(raw_b, al)),
                         rfmt(ratio(al, d.get("disk", kcs[0][0], "all", "allocated_bytes")))])
        for p in (FPE, CC):
            al = d.get("disk", p, "all", "allocated_bytes")
            if al is None:
                continue
            rows.append([p, fmt(d.get("populate", p, "all", "puts_per_s")),
                         f"{fmt(d.get('throughput', p, '1 proc', 'gets_per_s'))} "
                         f"({fmt(d.get('throughput', p, '1 proc', 'MB_per_s'))} MB/s)",
                         fmt(al, "B"), rfmt(ratio(raw_b, al)),
                         rfmt(ratio(al, d.get("disk", kcs[0][0], "all", "allocated_bytes")))])
        w(table(["system", "puts/s (filling the set)", "random hits/s, 1 process",
                 "disk (allocated)", "raw / disk", "disk / the default's"], rows))
        # Why the warm hits and the read throughput are behind: what a hit does
        # that cuda.core's does not, with each setting's figure and the disk it buys.
        mid = "32-128 KiB"
        kc0, c0 = kcs[0][0], kcs[0][1]
        others = "; ".join(f"with `compression = {c}` {fmt(d.get('hit_warm', s, mid, 'median_us'), 'us')}"
                           for s, c, df in kcs if not df)
        cd, kd = d.get("disk", CC, "all", "allocated_bytes"), d.get("disk", kc0, "all",
                                                                      "allocated_bytes")
        buys = (f"; it buys {rfmt(ratio(cd, kd))} less disk than cuda.core ({fmt(kd, 'B')} "
                f"against {fmt(cd, 'B')}) and a hit that never hands out damaged bytes"
                if cd and kd else "")
        kw = d.get("hit_warm", kc0, mid, "median_us")
        if kw:
            behind.reason("Store hit, warm",
                          f"a kcache hit reads the row from SQLite, checks the XXH3-128 of the "
                          f"stored bytes and decodes them ({c0}, the default), where cuda.core "
                          f"reads a file and checks nothing. At {mid}: kcache "
                          f"{fmt(kw, 'us')}, the floor of its codec (read + decode, no SQLite, "
                          f"no hash) {fmt(d.get('hit_warm', kc_floor(d), mid, 'median_us'), 'us')}, "
                          f"cuda.core {fmt(d.get('hit_warm', CC, mid, 'median_us'), 'us')}; "
                          f"{others}" + buys + ".")
        t1 = [(c, d.get("throughput", s, "1 proc", "gets_per_s")) for s, c, _ in kcs]
        if all(v for _, v in t1):
            behind.reason("Read throughput",
                          "the same work per hit as above, over entries of every size: one "
                          "process serves " + ", ".join(f"{fmt(v)}/s with {c}" for c, v in t1) +
                          f", cuda.core {fmt(d.get('throughput', CC, '1 proc', 'gets_per_s'))}/s" +
                          buys + ".")

    # ---- compile level ----------------------------------------------------
    w("## Compile through the cache (corpus kernels, in process)\n")
    w("Same source and options for every system; sm_90 CUBIN. No-cache times are medians of "
      "a few compiles (block_sort fewer); a miss is one compile that also stores; hits are "
      "medians (p99) of many, interleaved kcache / file-per-entry. cuda.core runs in its own "
      "Python process right after.\n")
    rows = []
    hit_parts, nocache_parts, miss_parts = [], [], []
    for k in d.cases("compile", "nvrtc"):
        nv = d.get("compile", "nvrtc", k, "median_ms")
        kn = d.get("compile", "kcache no-cache", k, "median_ms")
        cn = d.get("compile", "cuda.core no-cache", k, "median_ms")
        km = d.get("compile", KC, k, "miss_ms")
        fm = d.get("compile", FPE, k, "miss_ms")
        cm = d.get("compile", CC, k, "miss_ms")
        kh = d.get("compile", KC, k, "hit_median_us")
        fh = d.get("compile", FPE, k, "hit_median_us")
        ch = d.get("compile", CC, k, "hit_median_us")
        rows.append([k, fmt(d.get("compile", "-", k, "cubin_bytes"), "B"), fmt(nv), fmt(kn),
                     fmt(cn), fmt(km), fmt(fm), fmt(cm),
                     f"{fmt(kh)} / {fmt(d.get('compile', KC, k, 'hit_p99_us'))}",
                     f"{fmt(fh)} / {fmt(d.get('compile', FPE, k, 'hit_p99_us'))}",
                     f"{fmt(ch)} / {fmt(d.get('compile', CC, k, 'hit_p99_us'))}",
                     f"{nv * 1e3 / kh:,.0f}×" if nv and kh else "–",
                     rfmt(ratio(kh, fh)), rfmt(ratio(kh, ch))])
        behind.check("Compile without a cache (kcache no-cache)", kn, nv,
                     "NVRTC called directly", unit="ms", detail=k)
        behind.check("Compile miss (compile + store)", km, fm,
                     "NVRTC + file-per-entry put", unit="ms", detail=k)
        behind.check("Compile miss (compile + store)", km, cm, "cuda.core", unit="ms", detail=k)
        behind.check("Compile hit, median", kh, fh, "the file-per-entry cache", unit="us",
                     detail=k)
        behind.check("Compile hit, median", kh, ch, "cuda.core", unit="us", detail=k)
        sg = d.get("compile", KC, k, "store_get_median_us")
        nh = d.get("compile", KC, k, "headers")
        if kh and sg is not None and nh is not None:
            hit_parts.append(f"{k}: {fmt(kh, 'us')} = the store get {fmt(sg, 'us')} + "
                             f"{fmt(kh - sg, 'us')} resolving and hashing {nh:.0f} header(s) and "
                             "the source")
        if km and fm and nv:
            miss_parts.append(f"{k}: kcache {fmt(km, 'ms')}, NVRTC alone {fmt(nv, 'ms')}, "
                              f"NVRTC + file-per-entry put {fmt(fm, 'ms')}")
        if kn and nv:
            nocache_parts.append(f"{k} {fmt(kn - nv, 'ms')} ({(kn - nv) / nv:+.0%})")
    if hit_parts:
        behind.reason("Compile hit, median",
                      "a kcache compile hit checks every header the source includes (resolved on "
                      "the include path and hashed) before it trusts the entry; the "
                      "file-per-entry and cuda.core keys hash only the source and options, so an "
                      "edited header is a stale hit for them and a miss for kcache. Measured: " +
                      "; ".join(hit_parts) + ".")
    if miss_parts:
        behind.reason("Compile miss",
                      "a kcache miss is NVRTC plus what the hits will need: the headers found "
                      "and hashed, the CUBIN compressed and stored with its key material, "
                      "where the file-per-entry put writes raw bytes keyed by the source alone. "
                      "Measured: " + "; ".join(miss_parts) + ".")
    if nocache_parts:
        behind.reason("Compile without a cache",
                      "with no cache kcache still finds the source's headers (to key the entry "
                      "and to know what NVRTC read): " + ", ".join(nocache_parts) +
                      " over NVRTC called directly; it buys the header-exact key that every "
                      "later hit checks.")
    w(table(["kernel", "CUBIN", "NVRTC ms", "kcache no-cache ms", "cuda.core no-cache ms",
             "kcache miss ms", "file-per-entry miss ms", "cuda.core miss ms",
             "kcache hit µs (median / p99)", "file-per-entry hit µs", "cuda.core hit µs",
             "NVRTC / kcache hit", "kcache hit / file-per-entry hit", "kcache hit / cuda.core hit"],
            rows))
    hows = [r for r in d.recs if r["group"] == "note" and r["system"] == CC]
    if hows:
        w("How cuda.core was used, per kernel (measured: `Program.compile(cache=...)` was tried "
          "first):\n")
        for k in d.cases("compile", "nvrtc"):
            acc = d.get("compile", CC, k, "program_compile_cache_accepted")
            how = next((r["unit"] for r in hows if r["case"] == k and r["metric"] == "how"), "?")
            ref = next((r["unit"] for r in hows if r["case"] == k and r["metric"] == "refused"),
                       None)
            line = f"- {k}: " + ("`Program.compile(cache=)` accepts it" if acc else
                                 f"`Program.compile(cache=)` refuses it: \"{ref}\"") + \
                f". Timed as `{how}`" + ("" if "extra_digest" not in how else
                                          ", with a digest the user computes (here: CCCL's "
                                          "`cub/version.cuh` for block_sort, the corpus header "
                                          "files for headers/)") + \
                ", then `cache[key] = ` on a miss."
            if k == "tiled_gemm":
                line += (" A hit returns only the CUBIN: the lowered names of the name "
                         "expressions are not kept, so the caller must store them itself "
                         "(kcache keeps them with the entry).")
            w(line)
        w("")
    w("kcache's compile-level hit resolves every header the source includes and hashes it "
      "(that is what makes an edited header a miss); the file-per-entry and cuda.core hits hash "
      "only the source text and options, so their hits are cheaper and an edited header is a "
      "stale hit for them.\n")

    # ---- real header trees --------------------------------------------------
    rt_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "realtrees",
                           "results.json")
    w("## Real header trees (CuPy, Warp, MathDx)\n")
    try:
        rt = json.load(open(rt_path))
    except (OSError, ValueError):
        rt = []
    if not rt:
        w("`benchmarks/realtrees/run --json benchmarks/realtrees/results.json` has not been run "
          "here: rerun this command after it has.\n")
    else:
        w("From `realtrees/results.json` (`benchmarks/realtrees/run`, this machine, CPU only): "
          "kernels shaped like what CuPy's, Warp's and MathDx's code generators emit, with "
          "their options and their installed header trees. Hits are medians; NVRTC and the "
          "miss one run each. Details: `RESULTS-realtrees.md`.\n")
        rows = []
        for r in rt:
            plain, inproc = r.get("plain_ms"), r.get("hit_inproc_ms")
            rows.append([r.get("kernel", "?"), r.get("headers", "–"), fmt(plain),
                         fmt(r.get("miss_ms")), fmt(r.get("hit_whole_ms")), fmt(inproc),
                         f"{plain / inproc:,.0f}×" if plain and inproc else "–",
                         "yes" if r.get("whole_all_hits") and r.get("all_hits") else "NO",
                         "yes" if r.get("bytes_equal_plain") else
                         "yes but `__FILE__`" if r.get("equal_but_file_names") else "NO"])
        w(table(["kernel", "headers", "NVRTC ms", "kcache miss ms", "hit, whole process ms",
                 "hit, in process ms", "NVRTC / hit in process", "every hit a hit",
                 "bytes = plain NVRTC"], rows))

    # ---- end to end -------------------------------------------------------
    w("## Whole process on a hit (CLI)\n")
    w("Each a fresh process, timed from spawn to exit, interleaved; median. `kcache compile` "
      "writes the CUBIN; `ccache nvcc -c` writes an object (host + device code); the Python "
      "process imports cuda.core, looks the key up and writes the CUBIN. The floors show what "
      "starting each process costs.\n")
    rows = []
    kfloor = d.get("e2e", "kcache --version", "-", "median_ms")
    pfloor = d.get("e2e", "python -c 'import cuda.core'", "-", "median_ms")
    for k in ("saxpy", "block_sort"):
        e = {s: d.get("e2e", s, k, "median_ms")
             for s in ("kcache compile", "ccache nvcc -c", "cuda.core (python)")}
        if e["kcache compile"] is None:
            continue
        rows.append([k, fmt(e["kcache compile"]), fmt(e["ccache nvcc -c"]),
                     fmt(e["cuda.core (python)"]),
                     rfmt(ratio(e["kcache compile"], kfloor)),
                     rfmt(ratio(e["cuda.core (python)"], pfloor)),
                     rfmt(ratio(e["kcache compile"], e["ccache nvcc -c"])),
                     rfmt(ratio(e["kcache compile"], e["cuda.core (python)"]))])
        behind.check("Whole-process hit", e["kcache compile"], e["ccache nvcc -c"],
                     "ccache nvcc -c", unit="ms", detail=k)
        behind.check("Whole-process hit", e["kcache compile"], e["cuda.core (python)"],
                     "a cuda.core Python process", unit="ms", detail=k)
    w(table(["kernel", "kcache compile ms", "ccache nvcc -c ms", "cuda.core process ms",
             "kcache / its floor (`kcache --version`)",
             "cuda.core / its floor (import)", "kcache / ccache", "kcache / cuda.core"], rows))
    fl = [(s, d.get("e2e", s, "-", "median_ms")) for s in
          ("kcache --version", "static C program", "python -c 'import cuda.core'")]
    w("Process floors: " + "; ".join(f"`{s}` {fmt(v, 'ms')}" if s != "static C program" else
                                     f"a statically linked C program whose main returns 0 "
                                     f"{fmt(v, 'ms')}" for s, v in fl if v) + ".\n")
    sfloor = d.get("e2e", "static C program", "-", "median_ms")
    if kfloor and sfloor:
        w(f"`kcache --version` costs {rfmt(ratio(kfloor, sfloor))} a static program's start: the "
          "CLI links its own libraries statically (only libc, libm and the loader are loaded). "
          "The goal for a hit is 1.5× `kcache --version`; what a hit adds to it is the store's "
          "open (SQLite, see the first-hit reason above), resolving and hashing the headers, "
          "the get and writing the CUBIN.\n")
    cm = files.get("ccache", {})
    if cm:
        w("### ccache with `nvcc -cubin` and `nvcc -ptx`\n")
        w(table(["flag", "first run ms", "second run ms", "hits counted", "misses",
                 "counted as \"called for linking\"", "unsupported option"],
                [[f"`{f}`", fmt(v["first_ms"]), fmt(v["second_ms"]), v["hits"], v["misses"],
                  v["called_for_link"], v["unsupported_option"]]
                 for f, v in cm.get("flags", {}).items()]))
        for f, v in cm.get("flags", {}).items():
            w(f"`ccache -s` after two `ccache nvcc {f}` runs: " +
              "; ".join(f"`{x}`" for x in v["ccache_s"]) + "\n")
        if all(v["hits"] == 0 for v in cm.get("flags", {}).values()):
            w("So ccache does not cache `-cubin` or `-ptx` outputs: it only caches `-c`, and "
              "treats any other nvcc invocation as a link. Every such run recompiles.\n")
        rows = []
        for k in ("saxpy", "block_sort"):
            rows.append([k, fmt(d.get("ccache", "nvcc -c", k, "median_ms")),
                         fmt(d.get("ccache", "ccache", k, "miss_ms")),
                         fmt(d.get("ccache", "ccache", k, "hit_median_ms"))])
        w(table(["kernel (`nvcc -c`)", "no ccache ms", "ccache miss ms", "ccache hit ms"], rows))

    # ---- disk ---------------------------------------------------------------
    w("## Disk use for the synthetic set\n")
    raw = d.get("dataset", "-", "entries", "raw_bytes")
    rows = []
    for s in (KC, FPE, CC):
        ap_, al = d.get("disk", s, "all", "apparent_bytes"), d.get("disk", s, "all", "allocated_bytes")
        if ap_ is None:
            continue
        rows.append([s, fmt(ap_, "B"), fmt(al, "B"), fmt(al / n, "B") if n else "–",
                     fmt((al - raw) / n, "B") if n and raw else "–",
                     rfmt(ratio(al, raw)), fmt(d.get("disk", s, "all", "files")),
                     fmt(d.get("disk", s, "all", "dirs")),
                     rfmt(ratio(d.get("disk", KC, "all", "allocated_bytes"), al))])
        if s != KC:
            behind.check("Disk bytes (allocated)", d.get("disk", KC, "all", "allocated_bytes"),
                         al, s, unit="B")
    w(f"After writing the {fmt(n)} entries ({fmt(raw, 'B')} raw) and closing. Allocated = "
      "`st_blocks × 512` of every file and directory (kcache: database, WAL, shared-memory "
      "file); per-entry overhead = (allocated − raw) / entries, negative when compression wins.\n")
    w(table(["system", "apparent", "allocated", "per entry", "overhead per entry",
             "allocated / raw", "files (inodes)", "directories", "kcache / this"], rows))

    # ---- populate / throughput ---------------------------------------------
    w("## Writes and read throughput\n")
    rows = []
    kc_puts = d.get("populate", KC, "all", "puts_per_s")
    kcb_puts = d.get("populate", KCB, "all", "puts_per_s")
    for s in (KC, KCB, FPE, CC):
        v = d.get("populate", s, "all", "puts_per_s")
        if v is not None:
            rows.append([s, fmt(v), rfmt(ratio(kc_puts, v)),
                         rfmt(ratio(kcb_puts, v)) if kcb_puts is not None else "–"])
            if s in (FPE, CC):
                behind.check("Puts per second (filling the set)", kc_puts, v, s,
                             lower_is_better=False, unit="/s")
                if kcb_puts is not None:
                    behind.check("Puts per second, kcache batched (filling the set)", kcb_puts,
                                 v, s, lower_is_better=False, unit="/s")
    w("Puts while filling the set, one process (generation not timed; the file-per-entry "
      "cache does not fsync, cuda.core fsyncs each entry, kcache commits in WAL mode with "
      "synchronous=NORMAL, one transaction per put; \"kcache batched\": `kcache_batch_put`, "
      "64 entries per transaction, into a store of its own, interleaved with the others; "
      "the others have no batch):\n")
    w(table(["system", "puts/s", "kcache / this", "kcache batched / this"], rows))
    dk_all = d.get("disk", KC, "all", "allocated_bytes")
    df_all = d.get("disk", FPE, "all", "allocated_bytes")
    if kc_puts and dk_all and df_all:
        behind.reason("Puts per second",
                      "kcache compresses every artifact, takes BLAKE2b of its bytes (the "
                      "entry's digest, which bundles and the remote carry) and SQLite writes each "
                      "page twice (its WAL, then the checkpoint), where the file-per-entry cache "
                      "writes the raw bytes once (`benchmarks/PROFILE-writes.md` has a put's "
                      "instructions from before lz4 was the default). It buys the disk "
                      f"rows above: this run's set takes {fmt(df_all / dk_all)}× less disk in "
                      "kcache than in the file-per-entry cache, in 3 files instead of "
                      f"{fmt(d.get('disk', FPE, 'all', 'files'))}." +
                      (f" A caller with many entries at once gets {fmt(kcb_puts)} puts/s with "
                       f"`kcache_batch_put` ({kcb_puts / kc_puts - 1:+.0%})." if kcb_puts else ""))
    w("Random hits over all entries (uniform), page cache warm, each process its own handle, "
      "run for a fixed time; total over the processes:\n")
    rows = []
    for pc in ("1 proc", "2 proc", "4 proc"):
        kv = d.get("throughput", KC, pc, "gets_per_s")
        row = [pc]
        for s in (KC, FPE, CC):
            row.append(f"{fmt(d.get('throughput', s, pc, 'gets_per_s'))} "
                       f"({fmt(d.get('throughput', s, pc, 'MB_per_s'))} MB/s)")
        row += [rfmt(ratio(kv, d.get("throughput", FPE, pc, "gets_per_s"))),
                rfmt(ratio(kv, d.get("throughput", CC, pc, "gets_per_s")))]
        rows.append(row)
        for s in (FPE, CC):
            behind.check("Read throughput (gets/s)", kv,
                         d.get("throughput", s, pc, "gets_per_s"), s, lower_is_better=False,
                         unit="/s", detail=pc)
    w(table(["processes", "kcache gets/s", "file-per-entry gets/s", "cuda.core gets/s",
             "kcache / file-per-entry", "kcache / cuda.core"], rows))

    # ---- prune / cap --------------------------------------------------------
    w("## Eviction\n")
    w("Prune to half: kcache `kcache_store_prune` to half its stored bytes; file-per-entry "
      "`fpe_prune` (scan, sort by atime, unlink) to half its file bytes; cuda.core has no prune "
      "call, so it is opened with `max_size_bytes` at half (the open scans the directory) and "
      "one small write triggers its eviction; both steps are counted.\n")
    rows = []

    def per_entry(s):
        t, ev = d.get("prune", s, "to half", "seconds"), d.get("prune", s, "to half", "evicted")
        return t / ev if t is not None and ev else None

    for s in (KC, FPE, CC):
        t = d.get("prune", s, "to half", "seconds")
        if t is None:
            continue
        ev = d.get("prune", s, "to half", "evicted")
        pe = per_entry(s)
        rows.append([s, fmt(t * 1e3, "ms"), fmt(ev), fmt(pe * 1e6, "us") if pe else "–",
                     rfmt(d.get("prune", s, "to half", "bytes_after_over_target")),
                     rfmt(ratio(d.get("prune", KC, "to half", "seconds"), t)),
                     rfmt(ratio(per_entry(KC), pe)) if pe and per_entry(KC) else "–"])
        if s != KC and pe and per_entry(KC):
            behind.check("Prune to half, time per entry evicted", per_entry(KC) * 1e6, pe * 1e6,
                         s, unit="us")
    w(table(["system", "time", "entries evicted", "per entry evicted", "after / target",
             "kcache / this (time)", "kcache / this (per entry)"], rows))
    if per_entry(KC):
        behind.reason("Prune to half",
                      "a single file that gives space back has to move the live pages that "
                      "follow the evicted ones (the least recently used entries are the oldest, "
                      "at the front of the file) and write them through the WAL; a file per "
                      "entry unlinks. kcache ended at "
                      f"{rfmt(d.get('prune', KC, 'to half', 'bytes_after_over_target'))} of its "
                      "target, the files on disk and nothing more; the steps and their costs "
                      "are in `benchmarks/PROFILE-writes.md`.")
    cap = d.get("cap", "-", "cap", "bytes")
    w(f"### Writing past a size cap\n\nA fresh cache with a cap of {fmt(cap, 'B')}; entries of "
      f"the same size distribution written until {fmt(d.get('cap', '-', 'written', 'raw_over_cap'))}× "
      "the cap in raw bytes (so that kcache, which compresses, still passes its cap several "
      "times); on-disk size sampled every few dozen puts (kcache: database + WAL; the others: "
      "every file and directory, and the entry files alone, which is what their caps count).\n")
    rows = []
    for s in (KC, FPE, CC):
        mx = d.get("cap", s, "max", "disk_over_cap")
        if mx is None:
            continue
        rows.append([s, rfmt(mx), rfmt(d.get("cap", s, "end", "disk_over_cap")),
                     rfmt(d.get("cap", s, "end", "files_over_cap")),
                     fmt(d.get("cap", s, "end", "entries")), fmt(d.get("cap", s, "end", "dirs")),
                     fmt(d.get("cap", s, "all", "puts_per_s"))])
        if s != KC:
            behind.check("Puts per second while at the cap",
                         d.get("cap", KC, "all", "puts_per_s"),
                         d.get("cap", s, "all", "puts_per_s"), s, lower_is_better=False,
                         unit="/s")
    w(table(["system", "max on disk / cap", "at the end / cap", "entry files only / cap",
             "entries kept", "directories left", "puts/s at the cap"], rows))
    kmax = d.get("cap", KC, "max", "disk_over_cap")
    if kmax is not None:
        w(f"kcache's database + WAL {'stayed under' if kmax <= 1.0 else 'went OVER'} the cap "
          f"(max {kmax:.3f}× of it).\n")
    w("![on-disk size while writing past the cap](compare/size_cap.png)\n")

    # ---- GPU ----------------------------------------------------------------
    gpu = load_gpu(a.gpu_dir) if a.gpu_dir else []
    w("## On the GPU machine\n")
    if not gpu:
        w("CuPy's cache, the hot start and NVRTC's own cache need a GPU: **measured on the GPU "
          "machine**, `benchmarks/gpu/nvrtc-cache-rows.sh` (see `benchmarks/gpu/README.md`). No GPU "
          "results JSON was found under `benchmarks/gpu/` when this page was generated; rerun "
          "this command after it is there to merge it here.\n")
    titles = {"gpu-hotstart": "Hot start: process start to the first completed launch",
              "gpu-nvrtc-cache": "NVRTC's own cache (ComputeCache) as a system",
              "gpu-bench-compile": "kcache compile: cold against a hit"}
    settings = {"cold": "NVRTC's cache disabled (`CUDA_CACHE_DISABLE=1`) and emptied: cold rows "
                        "are cold",
                "nvrtc-warm": "NVRTC's own cache enabled and warmed by one untimed run first"}
    for p, j in gpu:
        kind = str(j.get("benchmark"))
        setting = j.get("setting")
        title = titles.get(kind, kind)
        w(f"### {title}{' (' + setting + ')' if setting else ''}\n")
        src = os.path.relpath(p, os.path.dirname(os.path.abspath(a.out)))
        w(f"From `{src}`" + (f" ({j['device']})" if j.get("device") else "") +
          (f"; {settings[setting]}" if setting in settings else "") + ".\n")
        if kind == "gpu-bench-compile":
            rows = [[r.get("figure", "?").strip(), fmt(r.get("value")), r.get("unit", "")]
                    for r in j.get("rows", [])]
            w(table(["figure", "median", "unit"], rows))
            continue
        if kind == "gpu-nvrtc-cache":
            w("Each figure a fresh process, from loading libnvrtc to the CUBIN in hand, median "
              f"of {j.get('runs', '?')}; interleaved. kcache's hit for the same kernel is in "
              "the compile table of the same run (bench_compile).\n")
            rows = [[r.get("kernel", "?"), r.get("system", "?"), fmt(r.get("median_ms")),
                     r.get("note", "")] for r in j.get("rows", [])]
            w(table(["kernel", "system", "ms", "note"], rows))
            # kcache's hit on the same kernel, from bench_compile in the same session
            hit = next((r.get("value") for _, g in gpu
                        if g.get("benchmark") == "gpu-bench-compile" and g.get("setting") == "cold"
                        for r in g.get("rows", [])
                        if r.get("figure") == "block_sort.cu hit, in process"), None)
            warm = next((r.get("median_ms") for r in j.get("rows", [])
                         if r.get("kernel") == "block_sort.cu"
                         and r.get("system") == "NVRTC's cache, warm, driver started"), None)
            if hit and warm:
                w(f"block_sort.cu: NVRTC's own cache warm (driver started) {fmt(warm, 'ms')}, a "
                  f"kcache hit in process {fmt(hit, 'us')} (bench_compile, same machine): "
                  f"{warm * 1e3 / hit:,.0f}× faster. Without a driver NVRTC's cache stores "
                  "nothing (a CPU-only CI runner gets no help from it).\n")
            saved = []
            for kern in sorted({r.get("kernel") for r in j.get("rows", [])}):
                v = {r.get("system"): r.get("median_ms") for r in j.get("rows", [])
                     if r.get("kernel") == kern}
                nc, wm = v.get("NVRTC --no-cache"), v.get("NVRTC's cache, warm")
                if nc and wm:
                    saved.append(f"{kern} {fmt(wm, 'ms')} against {fmt(nc, 'ms')} with "
                                 f"`--no-cache` ({(wm - nc) / nc:+.0%})")
            if saved:
                w("NVRTC's cache warm against no cache, same run: " + "; ".join(saved) + ".\n")
            continue
        w(f"Median of fresh processes ({j.get('kernel', '')}).\n")
        rows = [[r.get("variant", "?"), fmt(r.get("median_ms")), fmt(r.get("in_process_median_ms")),
                 r.get("note", "")] for r in j.get("rows", [])]
        w(table(["variant", "total ms", "in-process ms", "note"], rows))
        kw = next((r.get("median_ms") for r in j.get("rows", [])
                   if r.get("variant") == "kcache warm"), None)
        for r in j.get("rows", []):
            v = r.get("variant", "")
            if ("CuPy" in v or "cuda.core" in v) and r.get("median_ms") is not None and kw:
                behind.check("GPU hot start (process start to first launch)", kw,
                             r["median_ms"], v, unit="ms")

    # ---- behind -------------------------------------------------------------
    w("## Where kcache is behind\n")
    w("Every comparison above where kcache's figure is worse than an alternative's, found by "
      "the generator (not picked by hand):\n")
    w(f"(Differences under {Behind.TIE:.0%} are counted as ties.)\n")
    if behind.lines():
        for b in behind.lines():
            w(f"- {b}")
    else:
        w("- none in this run")
    w("")
    if behind.why():
        w("### Why, and what it buys\n")
        w("For each kind of row above, the measured reason (figures from this run) and the "
          "trade it buys.\n")
        for b in behind.why():
            w(f"- {b}")
        w("")
    w("## Notes\n")
    for r in files.values():
        for note in r.get("notes", []) if isinstance(r, dict) else []:
            w(f"- {note}")
    for name in ("cudacore-store", "cudacore-compile"):
        j = files.get(name, {})
        if j.get("error"):
            w(f"- {name}: the run stopped with `{j['error']}`; what it measured before is shown")
    w("- cuda.core reads an entry with one `read` and checks nothing (no hash, no "
      "decompression): a damaged file is handed back as it is. kcache decompresses and checks "
      "XXH3-128 on every hit and the file-per-entry cache checks BLAKE2b, which is most of why "
      "cuda.core's warm hits and read throughput are ahead for larger artifacts.")
    fd = d.get("disk", FPE, "all", "dirs")
    if fd:
        w(f"- The file-per-entry cache's 2-level fan-out (256 × 256 directories) left {fmt(fd)} "
          f"directories for {fmt(n)} entries, nearly one per entry, and they stay after their "
          "entries are evicted (as in CuPy's and Triton's caches): they cost disk (4 KiB each) "
          "and every scan for eviction opens each of them. cuda.core's 1-level fan-out has at "
          "most 256.")
    w("- cuda.core's figures come from a Python process: they include the interpreter's "
      "per-call overhead, which is what its users get.")
    w("- The file-per-entry cache is ours, written for this comparison (`fpe.c`), not CuPy's or "
      "Triton's code: it follows their design and cuda.core's eviction, in C, so that the "
      "difference measured is the design and not the language.")
    w("")
    os.makedirs(a.plots, exist_ok=True)
    made = plot(d, a.plots, a.plots_rel)
    with open(a.out, "w") as f:
        f.write("\n".join(md))
    print(f"wrote {a.out} and {', '.join(p for _, p in made)}")


if __name__ == "__main__":
    main()

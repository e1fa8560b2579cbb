"""What gen_results.py and results_sections.py share: the systems' names, the
JSON as one table of records, number formats, the list of rows where kcache
is behind, and the plots."""
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
                      "parse the schema, prepare the lookup, and at close append the hit to "
                      "PATH-hits (no write transaction). The SQLite floor measured beside it (one "
                      "table from key "
                      "to raw bytes, no checks, no decoding, no counters: the least any "
                      "one-SQLite-file design pays) is itself several times a file's open and "
                      "read, so no SQLite cache meets a file-per-entry cache here; what kcache "
                      "adds over that floor is its schema (every table and index is parsed by "
                      "each open; since schema 6 there are no triggers, which were half of that "
                      "parse, and since schema 7 no CHECKs or comments, a fifth of what was "
                      "left), the decoding and digest, and the hit it appends to PATH-hits. "
                      "Measured: " +
                      "; ".join(parts) + ". It buys one file instead of one per entry (see disk), "
                      "a size cap that holds, and writes that are atomic across processes.")
    if cold:
        behind.reason("Store hit, cold",
                      "from a cold page cache every b-tree page on the way is a disk read: the "
                      "schema, the WAL, the key index, the entry, its info and its artifact "
                      "rows, where a file-per-entry hit reads one file. A handle reads them "
                      "with pread() until its second hit: through a mapping each missing page "
                      "would bring the disk's whole read-around (8 MiB a fault on this VM; "
                      "40 MB and 30 ms a hit before, doc/design.md). Measured: " +
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

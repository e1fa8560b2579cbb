"""The later sections of benchmarks/RESULTS.md (compile level, real trees, whole
processes, disk, writes, eviction, the GPU machine), written by gen_results.py."""
import json
import os

from results_common import (BINS, CC, FPE, KC, KCB, SQF, Behind, fmt, kc_floor,
                            kc_settings, load_gpu, ratio, rfmt, table)


def later_sections(d, w, behind, files, a, cc_ok, cc_ver, mid, kfl, n):
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
                         "yes but `__FILE__`" if r.get("equal_but_file_names") else
                         "yes but `--pch` order of globals"
                         if r.get("equal_plain_without_pch") and r.get("equal_but_global_order")
                         else "NO"])
        w(table(["kernel", "headers", "NVRTC ms", "kcache miss ms", "hit, whole process ms",
                 "hit, in process ms", "NVRTC / hit in process", "every hit a hit",
                 "bytes = plain NVRTC"], rows))
        # A kernel kcache compiled without caching says why; its "hits" are compiles.
        uncached = {}
        for r in rt:
            if not r.get("keyed", True) and r.get("store_message"):
                uncached.setdefault(r["store_message"], []).append(r.get("kernel", "?"))
        for why, names in uncached.items():
            w(f"Not cached ({', '.join(names)}): {why}\n")

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
          ("kcache --version", "static C program", "one-table SQLite program",
           "python -c 'import cuda.core'")]
    said = {"static C program": "a statically linked C program whose main returns 0",
            "one-table SQLite program": "a hit from a one-table SQLite file "
                                        "(`benchmarks/compare/sqlite_process.c`)"}
    w("Process floors: " + "; ".join(f"{said[s]} {fmt(v, 'ms')}" if s in said else
                                     f"`{s}` {fmt(v, 'ms')}" for s, v in fl if v) + ".\n")
    sfloor = d.get("e2e", "static C program", "-", "median_ms")
    if kfloor and sfloor:
        w(f"`kcache --version` costs {rfmt(ratio(kfloor, sfloor))} a static program's start: the "
          "CLI links its own libraries statically (only libc, libm and the loader are loaded). "
          "The goal for a hit is 1.5× `kcache --version`; what a hit adds to it is the store's "
          "open (SQLite, see the first-hit reason above), resolving and hashing the headers, "
          "the get and writing the CUBIN.\n")
    qfloor = d.get("e2e", "one-table SQLite program", "-", "median_ms")
    khit = d.get("e2e", "kcache compile", "saxpy", "median_ms")
    if kfloor and qfloor and khit:
        w(f"A process that only opens a one-table SQLite file, selects the CUBIN by its key and "
          f"writes it, linked as the CLI links SQLite, takes {fmt(qfloor, 'ms')}: "
          f"{rfmt(ratio(qfloor, kfloor))} `kcache --version` before any key is computed, so "
          f"the goal of 1.5× leaves {fmt(max(0.0, 1.5 * kfloor - qfloor), 'ms')} for everything a "
          f"kcache hit does beyond it, where it takes {fmt(khit - qfloor, 'ms')} (saxpy): the "
          "toolkit's identity read from its files, the source read and hashed, the parse of "
          "kcache's schema (every table and index, against one table) and of its lookups, the "
          "checks of the stored bytes, and the pages all of that touches for the first time in "
          "a fresh process.\n")
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

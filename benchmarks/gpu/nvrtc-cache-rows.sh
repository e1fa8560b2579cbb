#!/usr/bin/env bash
# Honest cold rows on the GPU machine, and NVRTC's own cache as a
# compared system. NOT run on the build machine (no GPU there): the lead runs
# it on the H100/H200 after benchmarks/gpu/stage.sh, from the repository root:
#
#   benchmarks/gpu/nvrtc-cache-rows.sh [--runs N] [--cold-runs N]
#
# NVRTC 12.9+ keeps its own cache in the driver's ComputeCache
# (~/.nv/ComputeCache, or $CUDA_CACHE_PATH). kcache's compiles pass --no-cache
# now, but a row measured with that cache warm is not cold, and kcache's fixed
# --frandom-seed made NVRTC's cache hit in earlier "cold" rows. So each
# benchmark runs in two settings, each against its own fresh CUDA_CACHE_PATH:
#   cold:       CUDA_CACHE_DISABLE=1, the cache directory emptied first;
#   nvrtc-warm: NVRTC's cache enabled and warmed by one untimed run first.
# Then NVRTC's own cache as a system (nvrtc_cache.py: --no-cache, cold, warm,
# warm with the driver started). Prints one short table at the end: benchmark,
# setting, row, median.
set -u -o pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
dev=$root/.dev/gpu
runs=7 cold_runs=5
while [ $# -gt 0 ]; do
    case $1 in
    --runs) runs=$2; shift ;;
    --cold-runs) cold_runs=$2; shift ;;
    -h | --help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "nvrtc-cache-rows: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
say() { echo "nvrtc-cache-rows: $*" >&2; }
[ -x "$dev/bin/bench_gpu_start" ] && [ -x "$dev/bin/bench_compile" ] || {
    say "$dev is missing bench_gpu_start or bench_compile: run benchmarks/gpu/stage.sh here first"
    exit 1
}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export CORPUS=$root/examples
libs=$dev/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
work=$(mktemp -d "${TMPDIR:-/tmp}/kcache-nvrtc-rows-XXXXXX")
trap 'rm -rf "$work"' EXIT
out=${OUT:-$dev/out}
mkdir -p "$out"
export KCACHE_DIR=$work/cache-unused

run_setting() { # SETTING
    local setting=$1 cc=$work/computecache-$1
    rm -rf "$cc"
    mkdir -p "$cc"
    local envs=(CUDA_CACHE_PATH="$cc")
    [ "$setting" = cold ] && envs+=(CUDA_CACHE_DISABLE=1)
    if [ "$setting" = nvrtc-warm ]; then # one untimed pass fills NVRTC's cache
        env "${envs[@]}" LD_LIBRARY_PATH="$libs" "$dev/bin/bench_compile" \
            --kcache "$dev/bin/kcache" --corpus "$CORPUS" --runs 1 >/dev/null 2>&1
    fi
    say "bench_compile ($setting)"
    env "${envs[@]}" LD_LIBRARY_PATH="$libs" "$dev/bin/bench_compile" --kcache "$dev/bin/kcache" \
        --corpus "$CORPUS" --runs "$runs" --json "$out/bench_compile-$setting.json" \
        >"$out/bench_compile-$setting.txt" 2>&1 || say "bench_compile ($setting) failed: see $out"
    say "hot start ($setting)"
    env "${envs[@]}" PYTHONUNBUFFERED=1 python3 benchmarks/gpu/hotstart.py --libs "$libs" \
        --bench "$dev/bin/bench_gpu_start" --corpus "$CORPUS" --cuda "$CUDA_HOME" \
        --workdir "$work/hotstart-$setting" --json "$out/hotstart-$setting.json" \
        --runs "$runs" --cold-runs "$cold_runs" >"$out/hotstart-$setting.txt" 2>&1 ||
        say "hot start ($setting) failed: see $out"
}

run_setting cold
run_setting nvrtc-warm

say "NVRTC's own cache as a system"
python3 benchmarks/gpu/nvrtc_cache.py --cuda "$CUDA_HOME" --corpus "$CORPUS" --runs "$cold_runs" \
    --json "$out/nvrtc-cache.json" >"$out/nvrtc-cache.txt" 2>&1 ||
    say "nvrtc_cache.py failed: see $out/nvrtc-cache.txt"

# Each JSON says what it is and in which setting it ran, for the results page
# (benchmarks/compare/gen_results.py reads benchmarks/gpu/results/*.json).
python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
for setting in ("cold", "nvrtc-warm"):
    for name, kind in (("bench_compile", "gpu-bench-compile"), ("hotstart", "gpu-hotstart")):
        p = os.path.join(out, "%s-%s.json" % (name, setting))
        if os.path.exists(p):
            j = json.load(open(p))
            j["benchmark"], j["setting"] = kind, setting
            json.dump(j, open(p, "w"), indent=1)
PY

python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
print("%-12s %-11s %-58s %12s" % ("benchmark", "setting", "row", "median"))
for setting in ("cold", "nvrtc-warm"):
    p = os.path.join(out, "bench_compile-%s.json" % setting)
    if os.path.exists(p):
        for r in json.load(open(p))["rows"]:
            print("%-12s %-11s %-58s %9.3f %s" % ("compile", setting, r["figure"][:58], r["value"], r["unit"]))
    p = os.path.join(out, "hotstart-%s.json" % setting)
    if os.path.exists(p):
        rep = json.load(open(p))
        for r in rep.get("rows", rep.get("variants", [])):
            if isinstance(r, dict) and "variant" in r:
                med = r.get("median_ms", r.get("total_ms"))
                print("%-12s %-11s %-58s %9s ms" % ("hotstart", setting, r["variant"][:58],
                      "%.1f" % med if isinstance(med, (int, float)) else "-"))
p = os.path.join(out, "nvrtc-cache.json")
if os.path.exists(p):
    for r in json.load(open(p))["rows"]:
        print("%-12s %-11s %-58s %9.1f ms" % ("nvrtc-cache", "-", r["variant"][:58], r["median_ms"]))
PY

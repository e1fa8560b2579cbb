#!/usr/bin/env bash
# Runs the GPU test suite and the hot-start benchmark on a GPU machine, from
# the prebuilt tree in .dev/gpu/ (made by benchmarks/gpu/stage.sh on the build
# machine and carried along). One command, from the repository root:
#
#   benchmarks/gpu/run-on-gpu.sh [--runs N] [--cold-runs N] [--no-asan] [--no-bench]
#
# Prints the environment (device, driver, toolkit, CuPy, cuda.core), each
# test's result and the benchmark table, and ends with a summary. Writes
# env.txt, test-release.log, test-asan.log, bench.txt, bench_gpu_hotstart.json
# and summary.txt to $OUT when it is set (else to .dev/gpu/out/).
#
# Exit: 0 all passed; 1 a test or the benchmark failed, or this machine
# cannot run them (no driver, no GPU, no toolkit: the message says which).
set -u -o pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
dev=$root/.dev/gpu
runs=7 cold_runs=5 asan=1 bench=1
while [ $# -gt 0 ]; do
    case $1 in
    --runs) runs=$2; shift ;;
    --cold-runs) cold_runs=$2; shift ;;
    --no-asan) asan=0 ;;
    --no-bench) bench=0 ;;
    -h | --help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "run-on-gpu: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

say() { echo "run-on-gpu: $*" >&2; }
[ -x "$dev/bin/test_gpu" ] || {
    say "$dev is missing or incomplete: run benchmarks/gpu/stage.sh on the build machine and carry .dev/gpu"
    exit 1
}
out=${OUT:-$dev/out}
mkdir -p "$out"

# The machine must have what the tests need; say plainly what is missing.
# The dynamic loader's own answer, as dlopen in the library will get it.
have_driver=0
ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1' && have_driver=1
python3 -c 'import ctypes; ctypes.CDLL("libcuda.so.1")' 2>/dev/null && have_driver=1
if [ $have_driver = 0 ]; then
    say "no CUDA driver here (libcuda.so.1 not found): run this on the GPU machine"
    exit 1
fi
if command -v nvidia-smi >/dev/null && ! nvidia-smi -L >/dev/null 2>&1; then
    say "nvidia-smi sees no GPU: $(nvidia-smi -L 2>&1 | head -1)"
    exit 1
fi
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
# Either lib64/ or lib/ holds NVRTC; one of the two globs matching is enough.
if ! compgen -G "$CUDA_HOME/lib*/libnvrtc.so*" >/dev/null || [ ! -d "$CUDA_HOME/include/cccl" ]; then
    say "no CUDA toolkit with NVRTC and CCCL at $CUDA_HOME: set CUDA_HOME"
    exit 1
fi

# The kernels travel with the repository.
export CORPUS=$root/examples
release_libs=$dev/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
asan_libs=$dev/asan/lib:$dev/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
work=$(mktemp -d "${TMPDIR:-/tmp}/kcache-gpu-XXXXXX")
trap 'rm -rf "$work"' EXIT
# The library must never touch a real user cache here.
export KCACHE_DIR=$work/cache-unused

{
    echo "date:      $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "device:    $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
    echo "toolkit:   $CUDA_HOME ($("$CUDA_HOME"/bin/nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo 'no nvcc'))"
    echo "kcache:    $(LD_LIBRARY_PATH=$release_libs "$dev/bin/kcache" --version 2>&1)"
    echo "python3:   $(command -v python3) $(python3 --version 2>&1)"
    echo "cupy:      $(python3 -c 'import cupy; print(cupy.__version__)' 2>/dev/null || echo 'not installed')"
    echo "cuda.core: $(python3 -c 'from importlib.metadata import version; print(version("cuda-core"))' 2>/dev/null || echo 'not installed')"
    echo "staged:    $(head -2 "$dev/MANIFEST" 2>/dev/null | tr '\n' ' ')"
} | tee "$out/env.txt"
echo

status=0
summary=()

run_test() { # LABEL LOG LIBS BINARY [ENV...]
    local label=$1 log=$2 libs=$3 bin=$4
    shift 4
    local t0=$SECONDS rc
    echo "== test_gpu ($label)"
    env LD_LIBRARY_PATH="$libs" TMPDIR="$work" "$@" "$bin" >"$log" 2>&1
    rc=$?
    local verdict
    case $rc in
    0) verdict=PASS ;;
    77) verdict="SKIP ($(tail -1 "$log"))"; status=1 ;;
    *) verdict="FAIL (exit $rc)"; status=1 ;;
    esac
    tail -n 25 "$log"
    summary+=("test_gpu ($label): $verdict in $((SECONDS - t0)) s")
    echo "-> ${summary[-1]}"
    echo
}

run_test release "$out/test-release.log" "$release_libs" "$dev/bin/test_gpu"
# --arch native through the CLI: the driver names the architecture.
native=$(LD_LIBRARY_PATH=$release_libs KCACHE_DIR=$work/cli "$dev/bin/kcache" compile \
    "$CORPUS/saxpy.cu" --arch native --json 2>&1)
if echo "$native" | grep -q '"sm_[0-9]*a*"'; then
    summary+=("kcache compile --arch native: PASS ($(echo "$native" | grep -o '"sm_[0-9]*a*"' | head -1))")
else
    summary+=("kcache compile --arch native: FAIL: $(echo "$native" | tail -2 | tr '\n' ' ')")
    status=1
fi
echo "-> ${summary[-1]}"
echo

if [ $asan = 1 ]; then
    if [ -x "$dev/asan/bin/test_gpu" ]; then
        # The CUDA driver maps memory in ASan's shadow gap; its own allocations are not ours.
        run_test "ASan+UBSan" "$out/test-asan.log" "$asan_libs" "$dev/asan/bin/test_gpu" \
            ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=1:abort_on_error=1 \
            LSAN_OPTIONS=suppressions=$root/tests/gpu/lsan.supp \
            UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    else
        summary+=("test_gpu (ASan+UBSan): not staged (stage.sh --no-asan)")
    fi
fi

if [ $bench = 1 ]; then
    echo "== hot-start benchmark"
    t0=$SECONDS
    PYTHONUNBUFFERED=1 python3 benchmarks/gpu/hotstart.py --libs "$release_libs" \
        --bench "$dev/bin/bench_gpu_start" --corpus "$CORPUS" --cuda "$CUDA_HOME" \
        --workdir "$work/hotstart" --json "$out/bench_gpu_hotstart.json" \
        --runs "$runs" --cold-runs "$cold_runs" 2>&1 | tee "$out/bench.txt"
    rc=${PIPESTATUS[0]}
    if [ "$rc" = 0 ]; then
        summary+=("hot-start benchmark: done in $((SECONDS - t0)) s")
    else
        summary+=("hot-start benchmark: FAIL (exit $rc)")
        status=1
    fi
    echo
fi

{
    echo "== summary"
    head -2 "$out/env.txt"
    printf '%s\n' "${summary[@]}"
} | tee "$out/summary.txt"
exit $status

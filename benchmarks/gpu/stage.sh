#!/usr/bin/env bash
# Builds what the GPU machine needs and copies it into .dev/gpu/ (ignored by
# git, carried to the GPU machine; benchmarks/gpu/run-on-gpu.sh runs it there).
# Run here, from anywhere in the repository:
#
#   benchmarks/gpu/stage.sh            # release build (build-gpu) + ASan build (build-gpu-asan)
#   benchmarks/gpu/stage.sh --no-asan  # release only
#
# What lands in .dev/gpu/ (kept under 50 MB):
#   bin/       kcache, test_gpu, test_gpu_nodriver, bench_gpu_start, bench_compile (release)
#   lib/       libkcache.so.0 and every library it loads but glibc's (the GPU
#              image may lack them): libb2, libgomp, libzstd, liblz4, libsqlite3, libhiredis
#   lib/nvrtc-shim/libnvrtc.so.N  the drop-in NVRTC, where bin/kcache's `kcache run`
#              looks for it (../lib/nvrtc-shim/ beside bin/), so that
#              benchmarks/gpu/dropin/dropin.py runs as staged:
#                LD_LIBRARY_PATH=.dev/gpu/lib python3 benchmarks/gpu/dropin/dropin.py \
#                    --kcache .dev/gpu/bin/kcache
#   asan/bin, asan/lib   test_gpu and libkcache.so.0 built with ASan+UBSan,
#              and libasan/libubsan from this compiler
#   MANIFEST   what was built, from which commit, when
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
asan=1
[ "${1:-}" = "--no-asan" ] && asan=0
dev=.dev/gpu
limit_mb=50

die() { echo "stage: $*" >&2; exit 1; }

# Only the targets the GPU machine runs: the 2 shared cores here are precious.
cuda_major=$(sed -n 's/^#define CUDA_VERSION \([0-9]*\)[0-9][0-9][0-9]$/\1/p' \
    /usr/local/cuda/include/cuda.h 2>/dev/null | head -1)
[ -n "$cuda_major" ] || die "cannot read the CUDA major version from /usr/local/cuda/include/cuda.h"
shim=lib/nvrtc-shim/libnvrtc.so.$cuda_major
targets=(cli/kcache tests/gpu/test_gpu tests/gpu/test_gpu_nodriver
         benchmarks/gpu/bench_gpu_start benchmarks/bench_compile "$shim")

setup() { # DIR ARGS...
    local dir=$1; shift
    if [ -f "$dir/build.ninja" ]; then
        meson configure "$dir" "$@" >/dev/null
    else
        meson setup "$dir" "$@" >/dev/null
    fi
}

echo "stage: release build in build-gpu"
setup build-gpu --buildtype=release -Dtests=true -Dbenchmarks=true
ninja -C build-gpu "${targets[@]}" >/dev/null

if [ $asan = 1 ]; then
    echo "stage: ASan+UBSan build in build-gpu-asan"
    setup build-gpu-asan --buildtype=debugoptimized -Db_sanitize=address,undefined \
        -Db_lundef=false -Dtests=true -Dbenchmarks=true
    ninja -C build-gpu-asan tests/gpu/test_gpu >/dev/null
fi

# The real file behind each name: symbolic links do not travel.
libpath() { # SONAME [BINARY]
    local p
    p=$(ldd "${2:-build-gpu/lib/libkcache.so.0}" | awk -v n="$1" '$1 == n { print $3 }')
    [ -n "$p" ] && [ -e "$p" ] || die "cannot find $1 (needed by ${2:-libkcache.so.0})"
    readlink -f "$p"
}

rm -rf "$dev"
mkdir -p "$dev/bin" "$dev/lib"
cp build-gpu/cli/kcache build-gpu/tests/gpu/test_gpu build-gpu/tests/gpu/test_gpu_nodriver \
    build-gpu/benchmarks/gpu/bench_gpu_start build-gpu/benchmarks/bench_compile "$dev/bin/"
cp -L build-gpu/lib/libkcache.so.0 "$dev/lib/libkcache.so.0"
mkdir -p "$dev/lib/nvrtc-shim"
cp -L "build-gpu/$shim" "$dev/$shim"
# Every library libkcache.so.0 and the drop-in load, directly or not, except glibc's own
# (the GPU image has those): the list follows the build (hiredis and lz4
# came with the remote tier and the compression setting).
for from in build-gpu/lib/libkcache.so.0 "build-gpu/$shim"; do
    for so in $(ldd "$from" | awk '$3 ~ /^\// { print $1 }'); do
        case $so in
        libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | ld-linux*) continue ;;
        esac
        [ -e "$dev/lib/$so" ] || cp "$(libpath "$so" "$from")" "$dev/lib/$so"
    done
done
strip --strip-unneeded "$dev/bin/"* "$dev/lib/"*.so* "$dev/$shim" 2>/dev/null || true

if [ $asan = 1 ]; then
    mkdir -p "$dev/asan/bin" "$dev/asan/lib"
    cp build-gpu-asan/tests/gpu/test_gpu "$dev/asan/bin/"
    cp -L build-gpu-asan/lib/libkcache.so.0 "$dev/asan/lib/libkcache.so.0"
    for so in libasan.so.8 libubsan.so.1; do
        p=$(ldd build-gpu-asan/tests/gpu/test_gpu | awk -v n="$so" '$1 == n { print $3 }')
        [ -n "$p" ] || p=$(gcc -print-file-name="$so")
        [ -e "$p" ] || die "cannot find $so"
        cp "$(readlink -f "$p")" "$dev/asan/lib/$so"
    done
fi

{
    echo "staged: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n) ($(. /etc/os-release; echo "$PRETTY_NAME"))"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' + uncommitted changes')"
    echo "kcache: $("$dev/bin/kcache" --version 2>/dev/null || echo unknown)"
    echo "built against: $(grep -m1 '#define CUDA_VERSION' /usr/local/cuda/include/cuda.h 2>/dev/null || echo unknown)"
    echo "asan: $([ $asan = 1 ] && echo yes || echo no)"
    (cd "$dev" && find . -type f ! -name MANIFEST | sort | xargs ls -l | awk '{ print "  " $5 "\t" $9 }')
} >"$dev/MANIFEST"

size_kb=$(du -sk "$dev" | cut -f1)
[ "$size_kb" -le $((limit_mb * 1024)) ] || die "$dev is $((size_kb / 1024)) MB, over $limit_mb MB"
echo "stage: $dev ready ($((size_kb / 1024)) MB, $(find "$dev" -type f | wc -l) files)"
echo "stage: on the GPU machine, from the repository root: benchmarks/gpu/run-on-gpu.sh"

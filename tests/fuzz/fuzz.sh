#!/bin/sh
# Runs one libFuzzer target for a while and records what it did, for
# tests/report.py:
#
#   tests/fuzz/fuzz.sh BUILDDIR TARGET SECONDS
#
# BUILDDIR is a -Dfuzzing=true build (see README.md). New inputs go to a
# scratch directory, so the corpus in the repository stays small; a crash is
# written to BUILDDIR/tests/fuzz/crash-TARGET-* (fix it, then keep it as
# corpus/TARGET/regress-WHAT). The figures go to
# BUILDDIR/tests/results/fuzz-TARGET.tsv. Exit status: libFuzzer's.
set -u
if [ $# -ne 3 ]; then
    echo "usage: $0 BUILDDIR TARGET SECONDS" >&2
    exit 2
fi
build=$1 target=$2 seconds=$3
src=$(cd "$(dirname "$0")" && pwd)
exe="$build/tests/fuzz/fuzz_$target"
if [ ! -x "$exe" ]; then
    echo "$0: $exe does not exist: ninja -C $build tests/fuzz/fuzz_$target" >&2
    exit 1
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/kcache-fuzz-$target-XXXXXX") || exit 1
log="$build/tests/fuzz/fuzz-$target.log"
mkdir -p "$build/tests/results"
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    "$exe" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=4096 \
    -artifact_prefix="$build/tests/fuzz/crash-$target-" "$work" "$src/corpus/$target" \
    >"$log" 2>&1
rc=$?
runs=$(sed -n 's/^Done \([0-9]*\) runs in.*/\1/p' "$log" | tail -n 1)
if [ -z "$runs" ]; then
    runs=$(sed -n 's/^#\([0-9]*\)[[:space:]].*/\1/p' "$log" | tail -n 1)
fi
crashes=$(ls "$build/tests/fuzz/" 2>/dev/null | grep -c "^crash-$target-")
regressions=$(ls "$src/corpus/$target" | grep -c '^regress-')
printf 'fuzz-%s\texecutions=%s\tseconds=%s\tcrashes=%s\tregressions=%s\texit=%s\n' \
    "$target" "${runs:-0}" "$seconds" "$crashes" "$regressions" "$rc" \
    >"$build/tests/results/fuzz-$target.tsv"
rm -rf "$work"
tail -n 3 "$log"
exit $rc

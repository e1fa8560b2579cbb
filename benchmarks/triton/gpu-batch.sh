#!/usr/bin/env bash
# Triton and torch.compile on kcache, on the GPU machine, in one batch.
#
# Here (the build machine), once: a wheel of this checkout into .whl/ (ignored
# by git; carry it to the GPU machine):
#
#   pip wheel . --no-deps -w .whl
#   benchmarks/gpu/stage.sh --no-asan    # the libraries the module loads, in .dev/gpu/lib
#                                        # (the GPU image may lack libzstd, libhiredis, ...)
#
# There, from the repository root (torch and triton already installed):
#
#   benchmarks/triton/gpu-batch.sh        # writes to $OUT, else .dev/triton-gpu/
#
# It installs the wheel into a directory in /tmp put on PYTHONPATH (unless the
# interpreter, $PYTHON or python3, imports kcache.triton already), then runs
# gpu_check.py --kernels 20 --bench: the short table (Triton warm vs kcache
# warm, what the warm processes compiled, results the same) and bench.py's
# hit medians on that machine, then warm_pairs.py (the warm rows in turns). Exit status: gpu_check.py's (1: a check failed).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=${OUT:-$root/.dev/triton-gpu}
mkdir -p "$out"
py=${PYTHON:-python3}
if [ -d .dev/gpu/lib ]; then
    export LD_LIBRARY_PATH=$root/.dev/gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi

if ! "$py" -c "import kcache.triton" 2>/dev/null; then
    whl=
    for f in .whl/kcache_cuda-*.whl; do
        [ -e "$f" ] && whl=$f && break
    done
    if [ -z "$whl" ]; then
        echo "gpu-batch: $py cannot import kcache and there is no wheel in .whl/:" \
             "run 'pip wheel . --no-deps -w .whl' on the build machine and carry .whl" >&2
        exit 2
    fi
    # Beside the interpreter's own packages, whichever venv they are in: a directory
    # on PYTHONPATH, which gpu_check.py's child processes inherit.
    site=$(mktemp -d /tmp/kcache-gpu-batch-XXXXXX)
    trap 'rm -rf "$site"' EXIT
    "$py" -m pip install -q --no-deps --no-index --target "$site" "$whl"
    export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
fi

"$py" -c "import torch, triton, kcache; print('torch', torch.__version__, '| triton',
triton.__version__, '| kcache', kcache.__version__, '|', torch.cuda.get_device_name())" \
    | tee "$out/versions.txt"
set +e
"$py" benchmarks/triton/gpu_check.py --kernels 20 --json "$out/gpu_check.json" --bench \
    2>&1 | tee "$out/gpu_check.txt"
rc=${PIPESTATUS[0]}
# The warm rows again, the two caches in turns: one process against the next
# moves by more than the difference (warm_pairs.py says why).
"$py" benchmarks/triton/warm_pairs.py --kernels 20 --pairs "${PAIRS:-7}" \
    2>&1 | tee "$out/warm_pairs.txt"
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
echo "gpu-batch: exit $rc; output in $out"
exit "$rc"

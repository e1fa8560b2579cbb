"""One process of the hot-start benchmark for CuPy (run by hotstart.py).

    python3 cupy_start.py SOURCE CCCL_DIR NAME

NAME is either the name expression "sort_then_scan<128, 4>" (passed to
RawModule as name_expressions) or the kernel's mangled name (no name
expressions: the module is looked up as compiled). CuPy's on-disk cache is
$CUPY_CACHE_DIR. Prints one JSON line with CLOCK_MONOTONIC timestamps
(time.monotonic_ns is CLOCK_MONOTONIC on Linux, as in bench_gpu_start).
"""
import time

T_MAIN = time.monotonic_ns()  # before any import: the interpreter's own start is before this

import json  # noqa: E402
import sys  # noqa: E402

BLOCK, ITEMS, BLOCKS = 128, 4, 64
EXPR = "sort_then_scan<128, 4>"


def keys(np):
    # The same keys as bench_gpu_start: (i * 2654435761u) % 200001 - 100000, 32-bit wrap.
    i = np.arange(BLOCKS * BLOCK * ITEMS, dtype=np.uint64)
    return ((i * 2654435761) & 0xFFFFFFFF) % 200001 - 100000


def expected(np, k):
    t = np.sort(k.reshape(BLOCKS, BLOCK * ITEMS), axis=1)
    c = np.cumsum(t, axis=1) - t
    return c.reshape(-1).astype(np.int32)


def main():
    source, cccl, name = sys.argv[1], sys.argv[2], sys.argv[3]
    import numpy as np
    import cupy as cp

    t_import = time.monotonic_ns()
    code = open(source).read()
    options = ("-std=c++17", "-I" + cccl)
    if name == EXPR:
        mod = cp.RawModule(code=code, options=options, name_expressions=(EXPR,))
    else:
        mod = cp.RawModule(code=code, options=options)
    kernel = mod.get_function(name)
    t_fn = time.monotonic_ns()
    host = keys(np).astype(np.int32)
    din = cp.asarray(host)
    dout = cp.empty_like(din)
    kernel((BLOCKS,), (BLOCK,), (din, dout))
    cp.cuda.Device().synchronize()
    t_done = time.monotonic_ns()
    correct = bool((cp.asnumpy(dout) == expected(np, host.astype(np.int64))).all())
    print(json.dumps({"mode": "cupy", "main_ns": T_MAIN, "import_ns": t_import,
                      "function_ns": t_fn, "done_ns": t_done, "correct": correct,
                      "cupy": cp.__version__}))
    return 0 if correct else 1


if __name__ == "__main__":
    sys.exit(main())

"""One process of the hot-start benchmark for cuda.core (run by hotstart.py).

    python3 cudacore_start.py --probe
        Says whether the installed cuda.core has a persistent program cache
        (Program.compile(cache=...) with cuda.core.utils.FileStreamProgramCache).
    python3 cudacore_start.py SOURCE CCCL_DIR CACHE_DIR
        Compiles through that cache, launches sort_then_scan<128, 4>, waits.

Prints one JSON line with CLOCK_MONOTONIC timestamps.
"""
import time

T_MAIN = time.monotonic_ns()

import json
import os  # noqa: E402
import sys  # noqa: E402

BLOCK, ITEMS, BLOCKS = 128, 4, 64
EXPR = "sort_then_scan<128, 4>"


def core():
    try:
        import cuda.core as cc
        if not hasattr(cc, "Program"):
            raise ImportError
    except ImportError:
        import cuda.core.experimental as cc
    return cc


def cache_class():
    for mod in ("cuda.core.utils", "cuda.core.experimental.utils"):
        try:
            m = __import__(mod, fromlist=["FileStreamProgramCache"])
            return getattr(m, "FileStreamProgramCache")
        except (ImportError, AttributeError):
            continue
    return None


def version():
    try:
        from importlib.metadata import version as v
        return v("cuda-core")
    except Exception:  # noqa: BLE001 - any failure just means "unknown"
        return "unknown"


def probe():
    out = {"version": version(), "available": False}
    try:
        core()
    except Exception as e:  # noqa: BLE001
        out["why"] = "cuda.core is not importable: %s" % e
        return out
    if cache_class() is None:
        out["why"] = ("cuda.core %s has no persistent program cache "
                      "(no cuda.core.utils.FileStreamProgramCache)" % out["version"])
        return out
    out["available"] = True
    return out


def main():
    if sys.argv[1:] == ["--probe"]:
        print(json.dumps(probe()))
        return 0
    source, cccl, cache_dir, symbol = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    cc = core()
    Cache = cache_class()
    import numpy as np
    from cuda.bindings import driver

    t_import = time.monotonic_ns()
    dev = cc.Device(0)
    dev.set_current()
    cap = dev.compute_capability
    opts = cc.ProgramOptions(std="c++17", arch="sm_%d%d" % (cap[0], cap[1]),
                             include_path=[cccl])
    prog = cc.Program(open(source).read(), code_type="c++", options=opts)
    # cuda.core's cache refuses name_expressions (the lowered names do not
    # survive its round trip), so the kernel is looked up by its mangled name,
    # as a user of the cache has to.
    # It also refuses include paths unless the caller vouches for the headers
    # with an extra_digest, which Program.compile(cache=) cannot take; the
    # documented way is to derive the key and use the cache as a mapping.
    # The digest a user would cheaply give: CCCL's version header (weaker
    # than hashing what the compile reads, which kcache does).
    import hashlib
    try:
        from cuda.core.utils import make_program_cache_key
    except ImportError:
        from cuda.core.experimental.utils import make_program_cache_key
    with open(os.path.join(cccl, "cuda", "std", "__cccl", "version.h"), "rb") as f:
        digest = hashlib.sha256(f.read()).digest()
    key = make_program_cache_key(code=open(source).read(), code_type="c++", options=opts,
                                 target_type="cubin", extra_digest=digest)
    cache = Cache(cache_dir)
    data = cache.get(key)
    if data is None:
        mod = prog.compile("cubin")
        cache[key] = mod
    else:
        mod = cc.ObjectCode.from_cubin(data)
    kernel = mod.get_kernel(symbol)
    t_fn = time.monotonic_ns()
    i = np.arange(BLOCKS * BLOCK * ITEMS, dtype=np.uint64)
    host = (((i * 2654435761) & 0xFFFFFFFF) % 200001 - 100000).astype(np.int32)
    stream = dev.create_stream()
    din = dev.allocate(host.nbytes, stream=stream)
    dout = dev.allocate(host.nbytes, stream=stream)
    stream.sync()
    (err,) = driver.cuMemcpyHtoD(din.handle, host.ctypes.data, host.nbytes)
    if int(err) != 0:
        raise RuntimeError("cuMemcpyHtoD: %s" % err)
    cc.launch(stream, cc.LaunchConfig(grid=BLOCKS, block=BLOCK), kernel, din, dout)
    stream.sync()
    t_done = time.monotonic_ns()
    got = np.empty_like(host)
    (err,) = driver.cuMemcpyDtoH(got.ctypes.data, dout.handle, got.nbytes)
    t = np.sort(host.astype(np.int64).reshape(BLOCKS, -1), axis=1)
    want = (np.cumsum(t, axis=1) - t).reshape(-1).astype(np.int32)
    correct = int(err) == 0 and bool((got == want).all())
    print(json.dumps({"mode": "cuda.core", "main_ns": T_MAIN, "import_ns": t_import,
                      "function_ns": t_fn, "done_ns": t_done, "correct": correct,
                      "cuda_core": version()}))
    return 0 if correct else 1


if __name__ == "__main__":
    sys.exit(main())

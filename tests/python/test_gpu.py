"""On a GPU: a kernel compiled through kcache.compile (a template, by its name
expression) loads with cuda.core and runs. Skips without a GPU."""
import ctypes
import struct

import pytest

import kcache
from conftest import cuda_core, needs_toolkit

SOURCE = ("template <int K> __global__ void fill(unsigned *out)\n"
          "{ out[threadIdx.x] = K + threadIdx.x; }\n")


@needs_toolkit
def test_compile_load_launch(cache_dir):
    core = cuda_core()
    try:
        dev = core.Device()
        dev.set_current()
    except Exception as ex:  # no driver or no device: the CPU machines
        pytest.skip("no GPU here: %s" % ex)
    major, minor = dev.compute_capability
    arch = "sm_%d%d" % (major, minor)
    first = kcache.compile(SOURCE, arch=arch, name_expressions=["fill<7>"], cache=cache_dir)
    again = kcache.compile(SOURCE, arch=arch, name_expressions=["fill<7>"], cache=cache_dir)
    assert not first.hit and again.hit and again.data == first.data
    # The lowered name comes back with the hit: cuda.core finds the kernel by it.
    kernel = core.ObjectCode.from_cubin(again.data).get_kernel(again.lowered_names["fill<7>"])
    stream = dev.create_stream()
    n = 64
    buf = core.LegacyPinnedMemoryResource().allocate(4 * n, stream=stream)
    core.launch(stream, core.LaunchConfig(grid=1, block=n), kernel, buf)
    stream.sync()
    out = struct.unpack("%dI" % n, ctypes.string_at(int(buf.handle), 4 * n))
    assert out == tuple(7 + i for i in range(n))
    buf.close()

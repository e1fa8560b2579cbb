"""The real trees' shared parts: where the wheels go, the kernels each project's
code generator emits, plain NVRTC's output, whole-process hits (run, edits.py,
builds.py)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CACHE = os.path.join(HERE, '.cache')
WHEELS = ['cupy-cuda13x', 'warp-lang', 'nvidia-mathdx']
SEED = '--frandom-seed=0x2a2a'
TOOLKIT = os.environ.get('CUDA_HOME', '/usr/local/cuda')


def fetch_wheels():
    wheels = os.path.join(CACHE, 'wheels')
    os.makedirs(wheels, exist_ok=True)
    have = os.listdir(wheels)
    missing = [w for w in WHEELS if not any(f.startswith(w.replace('-', '_')) for f in have)]
    if missing:
        venv = os.path.join(CACHE, 'venv')
        if not os.path.exists(os.path.join(venv, 'bin', 'pip')):
            subprocess.run([sys.executable, '-m', 'venv', venv], check=True)
        subprocess.run([os.path.join(venv, 'bin', 'pip'), 'download', '--no-deps', '-q',
                        '-d', wheels] + missing, check=True)
    trees = os.path.join(CACHE, 'trees')
    for f in sorted(os.listdir(wheels)):
        name = f.split('-')[0]
        dest = os.path.join(trees, name)
        if f.endswith('.whl') and not os.path.isdir(dest):
            with zipfile.ZipFile(os.path.join(wheels, f)) as z:
                z.extractall(dest)
    return trees


def kernels(trees):
    cupy_inc = os.path.join(trees, 'cupy_cuda13x', 'cupy', '_core', 'include')
    cccl = os.path.join(cupy_inc, 'cupy', '_cccl')
    # As CuPy passes them: its bundled CCCL first, its own headers, the toolkit's.
    cupy_opts = ['-I' + os.path.join(cccl, 'libcudacxx'), '-I' + os.path.join(cccl, 'thrust'),
                 '-I' + os.path.join(cccl, 'cub'), '-I' + cupy_inc,
                 '-I' + os.path.join(TOOLKIT, 'include'), '--std=c++17',
                 '--device-as-default-execution-space', '--pch', SEED]
    cupy_head = ('#include <cupy/complex.cuh>\n#include <cupy/carray.cuh>\n'
                 '#include <cupy/atomics.cuh>\n')

    def elementwise(name, preamble, types, body):
        params = ', '.join('%sCArray<%s, 1, true, true> _raw_%s' % ('const ' if p.startswith('in')
                                                                   else '', t, p)
                           for p, t in types)
        typedefs = ''.join('typedef %s %s_type;\n' % (t, p) for p, t in types)
        loads = ''.join('const %s_type %s(_raw_%s[_ind.get()]);\n    ' % (p, p, p)
                        for p, t in types if p.startswith('in'))
        outs = ''.join('%s_type &%s = _raw_%s[_ind.get()];\n    ' % (p, p, p)
                       for p, t in types if p.startswith('out'))
        return (cupy_head + preamble + '\n' + typedefs +
                'extern "C" __global__ void %s(%s, CIndexer<1, true> _ind) {\n'
                '  CUPY_FOR(i, _ind.size()) {\n    _ind.set(i);\n    %s%s%s;\n  }\n}\n'
                % (name, params, loads, outs, body))

    ks = {}
    ks['cupy_elementwise'] = (elementwise('cupy_add__float32', '',
                                          [('in0', 'float'), ('in1', 'float'), ('out0', 'float')],
                                          'out0 = in0 + in1'), cupy_opts)
    ks['cupy_cub_reduction'] = (cupy_head + '''#include <cub/block/block_reduce.cuh>
#include <cub/block/block_load.cuh>
typedef float type_in0_raw; typedef float type_out0_raw;
extern "C" __global__ void cupy_sum__cub(const CArray<float, 1, true, true> _raw_in0,
                                         CArray<float, 1, true, true> _raw_out0, long long n) {
  typedef cub::BlockReduce<float, 512> BlockReduceT;
  __shared__ typename BlockReduceT::TempStorage temp_storage;
  float v = 0;
  for (long long i = blockIdx.x * 512 + threadIdx.x; i < n; i += 512 * gridDim.x)
    v += _raw_in0[i];
  float total = BlockReduceT(temp_storage).Sum(v);
  if (threadIdx.x == 0) atomicAdd(&_raw_out0[0], total);
}
''', cupy_opts)
    xsf = [
        ('xsf_lambertw', '#include <cupy/xsf/lambertw.h>',
         [('in0', 'complex<double>'), ('in1', 'long long'), ('in2', 'double'),
          ('out0', 'complex<double>')], 'out0 = xsf::lambertw(in0, in1, in2)'),
        ('xsf_ellik', '#include <cupy/xsf/cephes/ellik.h>',
         [('in0', 'double'), ('in1', 'double'), ('out0', 'double')],
         'out0 = xsf::cephes::ellik(in0, in1)'),
        ('xsf_ellie', '#include <cupy/xsf/cephes/ellie.h>',
         [('in0', 'double'), ('in1', 'double'), ('out0', 'double')],
         'out0 = xsf::cephes::ellie(in0, in1)'),
        ('xsf_sici', '#include <cupy/xsf/sici.h>',
         [('in0', 'double'), ('out0', 'double'), ('out1', 'double')],
         'double si, ci; xsf::sici(in0, si, ci); out0 = si; out1 = ci'),
        ('xsf_digamma', '#include <cupy/xsf/digamma.h>',
         [('in0', 'double'), ('out0', 'double')], 'out0 = xsf::digamma(in0)'),
        ('xsf_wright_bessel', '#include <cupy/xsf/wright_bessel.h>',
         [('in0', 'double'), ('in1', 'double'), ('in2', 'double'), ('out0', 'double')],
         'out0 = xsf::wright_bessel(in0, in1, in2)'),
    ]
    for name, pre, types, body in xsf:
        ks[name] = (elementwise('cupyx_scipy_' + name, pre, types, body), cupy_opts)

    native = os.path.join(trees, 'warp_lang', 'warp', 'native')
    ks['warp_kernel'] = ('''#define WP_TILE_BLOCK_DIM 256
#define WP_NO_CRT
#include "builtin.h"
#include "deterministic.h"
#define builtin_tid1d() wp::tid(_idx, dim)
extern "C" __global__ void saxpy_cuda_kernel_forward(wp::launch_bounds_t<1> dim,
    wp::array_t<wp::float32> var_x, wp::array_t<wp::float32> var_y, wp::float32 var_a)
{
    for (size_t _idx = static_cast<size_t>(blockDim.x) * static_cast<size_t>(blockIdx.x)
             + static_cast<size_t>(threadIdx.x);
         _idx < dim.size;
         _idx += static_cast<size_t>(blockDim.x) * static_cast<size_t>(gridDim.x))
    {
        wp::int32 var_0 = builtin_tid1d();
        wp::float32* var_1 = wp::address(var_x, var_0);
        wp::float32* var_2 = wp::address(var_y, var_0);
        wp::float32 var_3 = wp::load(var_1);
        wp::float32 var_4 = wp::load(var_2);
        wp::float32 var_5 = wp::mul(var_a, var_3);
        wp::float32 var_6 = wp::add(var_5, var_4);
        wp::array_store(var_y, var_0, var_6);
    }
}
''', ['--include-path=' + native, '--std=c++17', '--device-as-default-execution-space',
      '--use_fast_math', '--pch', '-DWP_ENABLE_CUDA=1', '-DWP_ENABLE_DEBUG=0', SEED])

    mathdx = os.path.join(trees, 'nvidia_mathdx', 'nvidia', 'mathdx')
    mathdx_opts = ['-I' + os.path.join(mathdx, 'include'),
                   '-I' + os.path.join(mathdx, 'external', 'cutlass', 'include'),
                   '-I' + os.path.join(TOOLKIT, 'include'),
                   '-I' + os.path.join(TOOLKIT, 'include', 'cccl'),
                   '--std=c++17', '--device-as-default-execution-space', SEED]
    ks['cufftdx'] = ('''#include <cufftdx.hpp>
using namespace cufftdx;
using FFT = decltype(Size<256>() + Precision<float>() + Type<fft_type::c2c>()
                     + Direction<fft_direction::forward>() + ElementsPerThread<8>()
                     + FFTsPerBlock<2>() + SM<900>() + Block());
extern "C" __global__ void __launch_bounds__(FFT::max_threads_per_block)
fft_kernel(typename FFT::value_type *data)
{
    using complex_type = typename FFT::value_type;
    complex_type thread_data[FFT::storage_size];
    const unsigned offset = size_of<FFT>::value * (blockIdx.x * FFT::ffts_per_block + threadIdx.y);
    unsigned index = offset + threadIdx.x;
    for (unsigned i = 0; i < FFT::elements_per_thread; i++) {
        if (i * FFT::stride + threadIdx.x < size_of<FFT>::value) {
            thread_data[i] = data[index];
            index += FFT::stride;
        }
    }
    extern __shared__ __align__(alignof(float4)) complex_type shared_mem[];
    FFT().execute(thread_data, shared_mem);
    index = offset + threadIdx.x;
    for (unsigned i = 0; i < FFT::elements_per_thread; i++) {
        if (i * FFT::stride + threadIdx.x < size_of<FFT>::value) {
            data[index] = thread_data[i];
            index += FFT::stride;
        }
    }
}
''', mathdx_opts)
    ks['cublasdx_gemm'] = ('''#include <cublasdx.hpp>
using GEMM = decltype(cublasdx::Size<32, 32, 32>() + cublasdx::Precision<float>()
                      + cublasdx::Type<cublasdx::type::real>()
                      + cublasdx::Function<cublasdx::function::MM>()
                      + cublasdx::Arrangement<cublasdx::row_major, cublasdx::col_major>()
                      + cublasdx::Block() + cublasdx::BlockDim<256>() + cublasdx::SM<900>());
extern "C" __global__ void gemm_kernel(const float *a, const float *b, float *c,
                                       float alpha, float beta)
{
    extern __shared__ __align__(16) char smem[];
    auto a_global = cublasdx::make_tensor(a, GEMM::get_layout_gmem_a());
    auto b_global = cublasdx::make_tensor(b, GEMM::get_layout_gmem_b());
    auto c_global = cublasdx::make_tensor(c, GEMM::get_layout_gmem_c());
    auto [smem_a, smem_b, smem_c] = cublasdx::slice_shared_memory<GEMM>(smem);
    auto a_shared = cublasdx::make_tensor(smem_a, GEMM::get_layout_smem_a());
    auto b_shared = cublasdx::make_tensor(smem_b, GEMM::get_layout_smem_b());
    auto c_shared = cublasdx::make_tensor(smem_c, GEMM::get_layout_smem_c());
    using alignment = cublasdx::alignment_of<GEMM>;
    cublasdx::copy<GEMM, alignment::a>(a_global, a_shared);
    cublasdx::copy<GEMM, alignment::b>(b_global, b_shared);
    cublasdx::copy<GEMM, alignment::c>(c_global, c_shared);
    cublasdx::copy_wait();
    GEMM().execute(alpha, a_shared, b_shared, beta, c_shared);
    __syncthreads();
    cublasdx::copy<GEMM, alignment::c>(c_shared, c_global);
}
''', mathdx_opts)
    return ks


def plain_ptx(path, opts):
    """PTX from plain NVRTC reading the disk (through ctypes: no kcache involved)."""
    import ctypes
    lib = ctypes.CDLL(os.path.join(TOOLKIT, 'lib64', 'libnvrtc.so.13'))
    prog = ctypes.c_void_p()
    with open(path, 'rb') as f:
        src = f.read()
    lib.nvrtcCreateProgram(ctypes.byref(prog), src, path.encode(), 0, None, None)
    o = [b'-arch=compute_90'] + [x.encode() for x in opts]
    rc = lib.nvrtcCompileProgram(prog, len(o), (ctypes.c_char_p * len(o))(*o))
    size = ctypes.c_size_t()
    out = b''
    if rc == 0:
        lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetPTX(prog, buf)
        out = buf.value
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return out


def strip_dirs(ptx, dirs):
    """Rewrites the string constants of plain NVRTC's PTX as kcache names files (__FILE__):
    a header found under an -I directory by its path below it."""
    import re

    def one(m):
        data = bytes(int(x) for x in m.group(3).split(','))
        for d in sorted(dirs, key=len, reverse=True):
            data = data.replace(d.encode() + b'/', b'')
        # PTX lists a string's bytes without its NUL, which the size counts.
        return '%s[%d] = {%s}' % (m.group(1), int(m.group(2)) - (len(m.group(3).split(',')) - len(data)),
                                  ', '.join(str(b) for b in data))
    text = ptx.decode('latin-1')
    text = re.sub(r'(\.b8 \$str[$\w]*)\[(\d+)\] = \{([\d, ]+)\}', one, text)
    return text


def equal_but_file_names(kcache, work, name, path, opts):
    """Whether kcache's PTX is plain NVRTC's once __FILE__ strings name files kcache's way."""
    dirs = [o[2:] for o in opts if o.startswith('-I')]
    dirs += [o.split('=', 1)[1] for o in opts if o.startswith('--include-path=')]
    dirs.append(os.path.dirname(path))
    out = os.path.join(work, name + '.kcache.ptx')
    env = dict(os.environ, KCACHE_PATH=os.path.join(work, name + '-ptx.db'))
    env.pop('KCACHE_DIR', None)
    p = subprocess.run([kcache, 'compile', path, '--arch', 'compute_90', '-q', '-o', out, '--']
                       + opts, env=env, capture_output=True)
    if p.returncode != 0:
        return False
    with open(out, 'rb') as f:
        ours = f.read().decode('latin-1')
    theirs = strip_dirs(plain_ptx(path, opts), dirs)
    def body(t):
        return [line for line in t.splitlines() if not line.startswith('//')]
    return body(ours) == body(theirs)


def whole_process_hits(kcache, db, src, opts, reps):
    """Median wall time of `kcache compile` processes on a warm cache, and whether each hit."""
    env = dict(os.environ, KCACHE_PATH=db)
    env.pop('KCACHE_DIR', None)
    cmd = [kcache, 'compile', src, '--arch', 'sm_90', '--json', '--'] + opts
    first = subprocess.run(cmd, env=env, capture_output=True, text=True)
    times, hits = [], True
    for _ in range(reps):
        t0 = time.perf_counter()
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
        times.append((time.perf_counter() - t0) * 1000)
        try:
            items = json.loads(p.stdout).get('items') or json.loads(p.stdout).get('results') or []
            doc = json.loads(p.stdout)
        except ValueError:
            items, doc = [], {}
        hits = hits and p.returncode == 0 and '"hit": true' in p.stdout.replace('"hit":true',
                                                                                '"hit": true')
        del items, doc
    return statistics.median(times), hits, first.returncode, (first.stderr or '').strip()


# ---- --edits: edit cases on aged trees --------------------------------------

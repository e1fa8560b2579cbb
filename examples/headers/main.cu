// A source with a small header tree: local_config.cuh is found beside this
// file ("quoted"), common.cuh only through -I headers/include (<angled>),
// and common.cuh includes detail/math.cuh in turn. A change to any of the
// three must change the cache key; include/unrelated.cuh is never included,
// so a change to it must not.
//
//   kcache compile headers/main.cu -I headers/include --arch sm_90
//
// blend: out = common_scale(mix(a, b, BLEND_WEIGHT)) = 2 * (a + 0.25 * (b - a)).
#include "local_config.cuh"
#include <common.cuh>

extern "C" __global__ void blend(const float *a, const float *b, float *out, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = common_scale(mix(a[i], b[i], BLEND_WEIGHT));
}

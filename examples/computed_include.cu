// The header's name comes from a macro: scanning the text for #include lines
// cannot say which file this source depends on. kcache must work it out (it
// asks the preprocessor) or refuse to cache, never key it without the header.
// Compile from this folder's parent or with this folder as the source's home:
// the path is relative to this file.
#define SCALE_HEADER "headers/include/common.cuh"
#include SCALE_HEADER

extern "C" __global__ void scale(float *v, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        v[i] = common_scale(v[i]);
}

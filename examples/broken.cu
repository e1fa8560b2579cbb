// Must not compile: NVRTC's log (naming undefined_symbol) has to reach the
// user, and a failed compile must leave nothing in the cache.
extern "C" __global__ void broken(float *out)
{
    out[threadIdx.x] = 2.0f * undefined_symbol;
}

// The smallest useful kernel: y <- a*x + y over n floats. Unmangled
// (extern "C"), so callers ask for it as "saxpy"; a grid-stride loop, so any
// launch shape covers any n. NVRTC takes a fraction of a second on it.
extern "C" __global__ void saxpy(float a, const float *x, float *y, int n)
{
    const int stride = gridDim.x * blockDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = a * x[i] + y[i];
}

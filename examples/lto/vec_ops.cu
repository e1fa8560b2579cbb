// Half of an LTO pair: a device function with no kernel. Compiled alone to
// LTO-IR (-dlto -rdc=true), then linked with launch.cu by nvJitLink into one
// CUBIN, where the call is inlined across the two units.
__device__ float mul_add_one(float x, float y)
{
    return x * y + 1.0f;
}

// Found through -I headers/include; pulls in a header of its own.
#pragma once
#include "detail/math.cuh"

// Doubling is exact in floating point, which lets a GPU test compare bits.
__device__ inline float common_scale(float x) { return x + x; }

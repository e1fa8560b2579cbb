// Two levels below main.cu: a change here must still reach the key.
#pragma once
__device__ inline float mix(float from, float to, float weight)
{
    return from + weight * (to - from);
}

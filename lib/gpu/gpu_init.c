/* The exported kcache_xxx_init() of the GPU side's versioned structs (<kcache/core.h>). */
#include "kcache/gpu.h"
#include "util/common.h"

KC_DEFINE_INIT(kcache_gpu_options, sizeof(kcache_gpu_options))

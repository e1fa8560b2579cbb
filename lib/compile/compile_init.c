/* The exported kcache_xxx_init() of the compile's versioned structs (<kcache/core.h>). */
#include <stddef.h>

#include "kcache/compile.h"
#include "util/common.h"

KC_DEFINE_INIT(kcache_compiler_options, offsetof(kcache_compiler_options, nvrtc_path),
               offsetof(kcache_compiler_options, remote), sizeof(kcache_compiler_options))
KC_DEFINE_INIT(kcache_request, offsetof(kcache_request, n_headers), sizeof(kcache_request),
               sizeof(kcache_request)) /* 3: the same fields, kcache_made's grew */
KC_DEFINE_INIT(kcache_link_request, sizeof(kcache_link_request))

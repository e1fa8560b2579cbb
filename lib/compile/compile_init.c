/* The exported kcache_xxx_init() of the compile's versioned structs (<kcache/core.h>). */
#include <stddef.h>

#include "kcache/compile.h"
#include "util/common.h"

KC_DEFINE_INIT(kcache_compiler_options, offsetof(kcache_compiler_options, nvrtc_path),
               offsetof(kcache_compiler_options, remote), sizeof(kcache_compiler_options))
/* 3: the same fields as 2, kcache_made's grew; 4: resolution_of. */
KC_DEFINE_INIT(kcache_request, offsetof(kcache_request, n_headers),
               offsetof(kcache_request, resolution_of), offsetof(kcache_request, resolution_of),
               sizeof(kcache_request))
KC_DEFINE_INIT(kcache_link_request, sizeof(kcache_link_request))

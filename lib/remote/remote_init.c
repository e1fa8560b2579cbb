/* The exported kcache_xxx_init() of the remote's versioned structs (<kcache/core.h>). */
#include <stddef.h>

#include "kcache/remote.h"
#include "util/common.h"

KC_DEFINE_INIT(kcache_remote_info, sizeof(kcache_remote_info))
KC_DEFINE_INIT(kcache_transfer, offsetof(kcache_transfer, conflicts), sizeof(kcache_transfer))

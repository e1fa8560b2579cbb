/* The exported kcache_xxx_init() of the store's versioned structs (<kcache/core.h>). */
#include <stddef.h>

#include "kcache/bundle.h"
#include "kcache/store.h"
#include "kcache/verify.h"
#include "util/common.h"

KC_DEFINE_INIT(kcache_store_options, offsetof(kcache_store_options, no_create),
               offsetof(kcache_store_options, compression), sizeof(kcache_store_options))
KC_DEFINE_INIT(kcache_entry, sizeof(kcache_entry))
KC_DEFINE_INIT(kcache_batch_options, sizeof(kcache_batch_options))
KC_DEFINE_INIT(kcache_namespace_stats, sizeof(kcache_namespace_stats))
KC_DEFINE_INIT(kcache_filter, sizeof(kcache_filter))
KC_DEFINE_INIT(kcache_prune_options, sizeof(kcache_prune_options))
KC_DEFINE_INIT(kcache_prune_result, sizeof(kcache_prune_result))
KC_DEFINE_INIT(kcache_bundle_options, offsetof(kcache_bundle_options, sign),
               sizeof(kcache_bundle_options))
KC_DEFINE_INIT(kcache_bundle_result, offsetof(kcache_bundle_result, conflicts),
               sizeof(kcache_bundle_result))
KC_DEFINE_INIT(kcache_recompress_options, sizeof(kcache_recompress_options))
KC_DEFINE_INIT(kcache_recompress_result, sizeof(kcache_recompress_result))
KC_DEFINE_INIT(kcache_verify_result, sizeof(kcache_verify_result))

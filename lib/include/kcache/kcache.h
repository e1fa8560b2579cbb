/*
 * kcache: a cache of compiled CUDA kernels (CUBIN, PTX, LTO-IR) in one SQLite
 * file. This header includes every public header, for a program (or a
 * binding) that wants the whole API in one line; each header also stands
 * alone:
 *   <kcache/core.h>     version, status codes, kinds, the key, logging
 *   <kcache/store.h>    the store: entries, caller-keyed entries, stats, prune
 *   <kcache/compile.h>  compiles and links through the cache
 *   <kcache/bundle.h>   export and import
 *   <kcache/verify.h>   checking every entry
 *   <kcache/remote.h>   the shared tier
 *   <kcache/config.h>   the settings and where each came from
 *   <kcache/cubin.h>    a CUBIN's kernels and their resources
 *   <kcache/gpu.h>      from a request to a launchable CUfunction
 */
#ifndef KCACHE_KCACHE_H
#define KCACHE_KCACHE_H

#include <kcache/core.h>
#include <kcache/store.h>
#include <kcache/compile.h>
#include <kcache/bundle.h>
#include <kcache/verify.h>
#include <kcache/remote.h>
#include <kcache/config.h>
#include <kcache/cubin.h>
#include <kcache/gpu.h>

#endif /* KCACHE_KCACHE_H */

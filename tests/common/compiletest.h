/*
 * Helpers shared by the compile tests: a compiler over a store (or none),
 * with the default toolkit or one the test made.
 */
#ifndef KC_COMPILETEST_H
#define KC_COMPILETEST_H

#include <kcache/compile.h>

#include "testutil.h"

/* A compiler on s (NULL: no store), with the toolkit at root (NULL: the one found). */
static inline kcache_compiler *ct_compiler(kcache_store *s, const char *root)
{
    kcache_compiler_options o = KCACHE_COMPILER_OPTIONS_INIT;
    o.store = s;
    o.no_store = s == NULL;
    o.toolkit_root = root;
    kcache_compiler *c = NULL;
    char err[512];
    if (kcache_compiler_new(&c, &o, err, sizeof(err)) != 0)
        fprintf(stderr, "compiler (toolkit %s): %s\n", root ? root : "found", err);
    REQUIRE(c);
    return c;
}

#endif

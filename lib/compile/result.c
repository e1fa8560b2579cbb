/*
 * A compile's result: made, failed, served from an entry, freed. Below the
 * compiler and the single flight, which both fill results.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compile/compileint.h"

struct kc_result *kc_result_new(void)
{
    struct kc_result *r = kc_calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->pub.version = KCACHE_RESULT_VERSION;
    r->pub.message = r->message;
    r->pub.store_message = r->store_message;
    r->pub.log = "";
    r->pub.arch = r->arch;
    return r;
}

KCACHE_API void kcache_result_free(kcache_result *result)
{
    if (!result)
        return;
    struct kc_result *r = (struct kc_result *)result;
    kcache_entry_free(r->entry);
    free(r->data);
    free(r->log);
    kc_strv_free(r->exprs, r->n_names);
    kc_strv_free(r->lowered, r->n_names);
    kc_strv_free(r->headers, r->n_headers);
    kc_buf_free(&r->material);
    free(r);
}

KCACHE_API const char *kcache_result_lowered_name(const kcache_result *result,
                                                  const char *name_expr)
{
    if (!result || !name_expr)
        return NULL;
    for (size_t i = 0; i < result->n_names; i++)
        if (strcmp(result->name_exprs[i], name_expr) == 0)
            return result->lowered_names[i];
    return NULL;
}

int kc_result_fail(struct kc_result *r, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->message, sizeof(r->message), fmt, ap);
    va_end(ap);
    for (char *p = r->message; *p; p++)
        if (*p == '\n')
            *p = ' ';
    return code;
}

void kc_result_store_problem(struct kc_result *r, int status, const char *msg)
{
    if (r->pub.store_status)
        return; /* the first problem is the one worth telling */
    r->pub.store_status = status;
    size_t n = KC_MIN(strlen(msg), sizeof(r->store_message) - 1);
    memcpy(r->store_message, msg, n);
    r->store_message[n] = '\0';
}

/* Serves a result from a cache entry, which it takes over. */
void kc_result_from_entry(struct kc_result *r, kcache_entry *e)
{
    r->entry = e;
    r->pub.hit = 1;
    r->pub.data = e->data;
    r->pub.size = e->size;
    r->pub.log = e->log;
    r->pub.n_names = e->n_names;
    r->pub.name_exprs = e->name_exprs;
    r->pub.lowered_names = e->lowered_names;
    r->pub.compile_ns = e->compile_ns;
    r->pub.kind = e->kind;
}

void kc_result_keyed(struct kc_result *r)
{
    r->pub.key_material = r->material.data;
    r->pub.key_material_size = r->material.size;
}

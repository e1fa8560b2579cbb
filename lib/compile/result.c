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
#include <sys/stat.h>
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

void kc_result_headers_reset(struct kc_result *r)
{
    if (r->headers_block)
        free(r->headers);
    else
        kc_strv_free(r->headers, r->n_headers);
    r->headers = NULL;
    r->n_headers = 0;
    r->headers_block = 0;
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
    kc_result_headers_reset(r);
    kc_buf_free(&r->material);
    if (r->kept)
        kc_deps_free(&r->kept->deps);
    free(r->kept);
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

/*
 * The first line of the log that says "error", control bytes made spaces, in
 * out. Returns 0 if the log has none.
 */
static int first_error_line(char *out, size_t out_size, const char *log)
{
    for (const char *line = log; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t n = end ? (size_t)(end - line) : strlen(line);
        const char *e = strstr(line, "error");
        if (e && (size_t)(e - line) < n) {
            size_t k = 0;
            for (size_t i = 0; i < n && k + 1 < out_size; i++)
                out[k++] = (unsigned char)line[i] < 0x20 ? ' ' : line[i];
            out[k] = '\0';
            return 1;
        }
        line = end ? end + 1 : NULL;
    }
    return 0;
}

/*
 * Where in the toolkit a header NVRTC could not open lives, when it does:
 * "<root>/include" or "<root>/include/cccl" in dir. The name comes from
 * NVRTC's own words: could not open source file "NAME".
 */
static int toolkit_dir_of(char *dir, size_t dir_size, const char *line, const char *root)
{
    static const char said[] = "could not open source file \"";
    const char *p = root ? strstr(line, said) : NULL;
    if (!p)
        return 0;
    p += sizeof(said) - 1;
    const char *q = strchr(p, '"');
    if (!q || q == p || q - p > 1024 || memchr(p, '\0', (size_t)(q - p)))
        return 0;
    static const char *const below[] = {"include", "include/cccl"};
    for (size_t i = 0; i < KC_ARRAY_SIZE(below); i++) {
        char path[PATH_MAX];
        struct stat st;
        int n = snprintf(path, sizeof(path), "%s/%s/%.*s", root, below[i], (int)(q - p), p);
        if (n > 0 && (size_t)n < sizeof(path) && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            snprintf(dir, dir_size, "%s/%s", root, below[i]);
            return 1;
        }
    }
    return 0;
}

int kc_result_compile_failed(struct kc_result *r, const char *source_name, const char *root)
{
    char line[400], dir[PATH_MAX];
    if (!first_error_line(line, sizeof(line), r->log))
        return kc_result_fail(r, KCACHE_ECOMPILE, "%s did not compile (see the log)",
                              source_name);
    if (toolkit_dir_of(dir, sizeof(dir), line, root))
        return kc_result_fail(r, KCACHE_ECOMPILE, "%s: a CUDA toolkit header: add -I %s", line,
                              dir);
    return kc_result_fail(r, KCACHE_ECOMPILE, "%s", line);
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
int kc_result_names_begin(struct kc_result *r, size_t n)
{
    r->exprs = kc_calloc(n + 1, sizeof(char *));
    r->lowered = kc_calloc(n + 1, sizeof(char *));
    if (!r->exprs || !r->lowered)
        return KCACHE_ENOMEM;
    r->pub.name_exprs = (const char *const *)r->exprs;
    r->pub.lowered_names = (const char *const *)r->lowered;
    return 0;
}

int kc_result_add_name(struct kc_result *r, const char *expr, const char *lowered)
{
    size_t i = r->n_names;
    r->exprs[i] = kc_strdup(expr);
    r->lowered[i] = kc_strdup(lowered);
    r->pub.n_names = r->n_names = i + 1;
    return r->exprs[i] && r->lowered[i] ? 0 : KCACHE_ENOMEM;
}

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

/* Running NVRTC on prepared work: the only calls into NVRTC for a compile. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compile/compileint.h"

int kc_nvrtc_cache_option(char ***opts, size_t *n_opts, const kc_opts *o, unsigned flags)
{
    if (flags & KCACHE_COMPILE_NVRTC_CACHE)
        return 0;
    /* opts.c canonicalises every spelling (-no-cache too) to --no-cache. */
    for (size_t i = 0; i < o->n_unkeyed; i++)
        if (strcmp(o->unkeyed[i], "--no-cache") == 0)
            return 0;
    return kc_strv_push(opts, n_opts, "--no-cache");
}

static int nvrtc_fail(struct kc_result *r, const kc_nvrtc *api, nvrtcResult res, const char *what)
{
    return kc_result_fail(r, res == NVRTC_ERROR_OUT_OF_MEMORY ? KCACHE_ENOMEM : KCACHE_EIO,
                          "NVRTC %s: %s", what, api->GetErrorString(res));
}

/*
 * NVRTC refused an option. An architecture it does not know is the usual
 * cause, and its log does not name it: the message does, with the ones it
 * knows. Otherwise the log's first line says which option.
 */
static int invalid_option(struct kc_result *r, const kc_nvrtc *api, const char *arch)
{
    int n = 0, archs[128];
    unsigned want = 0;
    if (sscanf(arch, "%*[a-z]_%u", &want) == 1 && api->GetNumSupportedArchs(&n) == NVRTC_SUCCESS &&
        n > 0 && n <= (int)KC_ARRAY_SIZE(archs) && api->GetSupportedArchs(archs) == NVRTC_SUCCESS) {
        int known = 0;
        for (int i = 0; i < n; i++)
            known |= archs[i] == (int)want;
        if (!known)
            return kc_result_fail(r, KCACHE_EINVAL,
                                  "%s is not an architecture this NVRTC knows: sm_%d ... sm_%d",
                                  arch, archs[0], archs[n - 1]);
    }
    const char *log = r->log ? r->log : "";
    size_t len = strcspn(log, "\n");
    if (len)
        return kc_result_fail(r, KCACHE_EINVAL, "NVRTC refused an option: %.*s", (int)KC_MIN(len, 300),
                              log);
    return nvrtc_fail(r, api, NVRTC_ERROR_INVALID_OPTION, "failed");
}

/* What NVRTC is handed besides the source: headers in memory and options. */
struct nvrtc_args {
    const char **contents, **spellings;
    size_t n_headers;
    char **opts, **handed;
    size_t n_opts, n_handed;
};

static void nvrtc_args_free(struct nvrtc_args *a)
{
    kc_strv_free(a->opts, a->n_opts);
    kc_strv_free(a->handed, a->n_handed);
    free(a->contents);
    free(a->spellings);
}

/*
 * The headers NVRTC gets in memory. Hermetic: the user headers the resolution
 * read, and the toolkit headers handed by spelling (resolve/hermetic.c says
 * which and why) as one #include of the file by its real path, which NVRTC
 * opens as it opens every toolkit header; hermetic.c hands no path that
 * needs escaping in a string literal. Reading the disk as NVRTC would: the
 * caller's in-memory headers.
 */
static int nvrtc_headers(struct nvrtc_args *a, const kcache_compiler *c,
                         const kcache_request *req, const struct work *w, struct kc_result *r,
                         int hermetic)
{
    char buf[PATH_MAX + 32];
    size_t n_mem = req->version >= 2 ? req->n_headers : 0;
    size_t n_max = (hermetic ? w->deps.n_deps + w->deps.n_handed / 2 : n_mem) + 1;
    a->contents = kc_calloc(n_max, sizeof(char *));
    a->spellings = kc_calloc(n_max, sizeof(char *));
    if (!a->contents || !a->spellings)
        return KCACHE_ENOMEM;
    for (size_t i = 0; hermetic && i < w->deps.n_deps; i++) {
        const kc_dep *d = &w->deps.deps[i];
        if (d->state != KC_DEP_USER)
            continue;
        a->contents[a->n_headers] = d->content;
        a->spellings[a->n_headers++] = d->name;
        if (!d->nvpath)
            continue;
        /* Under the path NVRTC reading the disk would open it by, for its __FILE__
         * and its diagnostics (resolve/lookup.c, note_nvpath; names.c checked it
         * needs no escape). */
        kc_buf b = {0};
        if (kc_buf_append(&b, "#line 1 \"", 9) || kc_buf_append(&b, d->nvpath, strlen(d->nvpath)) ||
            kc_buf_append(&b, "\"\n", 2) || kc_buf_append(&b, d->content, d->size) ||
            kc_buf_append(&b, "", 1) || kc_strv_push_owned(&a->handed, &a->n_handed, (char *)b.data)) {
            kc_buf_free(&b);
            return KCACHE_ENOMEM;
        }
        a->contents[a->n_headers - 1] = a->handed[a->n_handed - 1];
    }
    for (size_t i = 0; hermetic && i + 1 < w->deps.n_handed; i += 2) {
        int len = snprintf(buf, sizeof(buf), "#include \"%s/%s\"\n", c->tk.root,
                           w->deps.handed[i + 1]);
        if (len < 0 || (size_t)len >= sizeof(buf))
            return kc_result_fail(r, KCACHE_EINVAL, "a toolkit header's path is too long");
        int rc = kc_strv_push(&a->handed, &a->n_handed, buf);
        if (rc)
            return rc;
        a->contents[a->n_headers] = a->handed[a->n_handed - 1];
        a->spellings[a->n_headers++] = w->deps.handed[i];
    }
    for (size_t i = 0; !hermetic && i < n_mem; i++) {
        a->contents[a->n_headers] = req->header_contents[i];
        a->spellings[a->n_headers++] = req->header_names[i];
    }
    return 0;
}

/* The options NVRTC gets: the request's, the target, the search path and the seed. */
static int nvrtc_options(struct nvrtc_args *a, const kcache_compiler *c,
                         const kcache_request *req, const struct work *w, struct kc_result *r,
                         int hermetic)
{
    char buf[PATH_MAX + 32];
    int rc = 0;
    for (size_t i = 0; i < w->opts.n_canonical && !rc; i++)
        rc = kc_strv_push(&a->opts, &a->n_opts, w->opts.canonical[i]);
    for (size_t i = 0; i < w->opts.n_unkeyed && !rc; i++) {
        /*
         * Not NVRTC's automatic PCH, in any compile kcache runs: NVRTC 13
         * reuses a PCH made earlier in the process whenever the options and
         * the opening directives match, without looking at the headers again
         * (checked: a header edited, in memory or on disk, the same bytes as
         * before; even another source file with the same opening includes).
         * A miss must be the bytes of the headers it is keyed by, and a
         * compile kcache cannot cache must still be the headers' kernel as
         * they are now (test_trees: test_pch_uncached_after_edit).
         */
        if (!strcmp(w->opts.unkeyed[i], "--pch"))
            continue;
        rc = kc_strv_push(&a->opts, &a->n_opts, w->opts.unkeyed[i]);
    }
    /* Several -arch: NVRTC combines them as it does (uncached, compile.c). */
    for (size_t i = 0; w->opts.several_archs && i < w->opts.n_archs && !rc; i++)
        rc = kc_strv_push(&a->opts, &a->n_opts, w->opts.archs[i]);
    snprintf(buf, sizeof(buf), "--gpu-architecture=%s", w->nvrtc_arch);
    if (!rc && !w->opts.several_archs)
        rc = kc_strv_push(&a->opts, &a->n_opts, buf);
    /*
     * Hermetic: the toolkit's directories alone, as the request spelled them:
     * NVRTC writes a toolkit header's path as it opened it (its __FILE__, its
     * diagnostics), and the key holds both spellings (compile.c), checked
     * again after the compile (toolkit_dirs_hold()).
     */
    for (size_t i = 0; hermetic && i < w->n_tk_dirs && !rc; i++) {
        int len = w->tk_spelled
                      ? snprintf(buf, sizeof(buf), "--include-path=%s", w->tk_spelled[i])
                      : snprintf(buf, sizeof(buf), "--include-path=%s/%s", c->tk.root,
                                 w->tk_dirs[i]);
        rc = len > 0 && (size_t)len < sizeof(buf)
                 ? kc_strv_push(&a->opts, &a->n_opts, buf)
                 : kc_result_fail(r, KCACHE_EINVAL, "a toolkit directory's path is too long");
    }
    for (size_t i = 0; !hermetic && i < w->opts.n_include_dirs && !rc; i++) {
        snprintf(buf, sizeof(buf), "--include-path=%s", w->opts.include_dirs[i]);
        rc = kc_strv_push(&a->opts, &a->n_opts, buf);
    }
    if (!rc && (hermetic || w->opts.no_source_include))
        rc = kc_strv_push(&a->opts, &a->n_opts, "--no-source-include");
    if (!rc && !w->opts.has_seed) {
        /* Reproducible bytes: the seed comes from the key, so a recompile, a
         * CI runner and a laptop all produce the same CUBIN for one key.
         * 32 bits: NVRTC 13 silently ignores a 64-bit seed (seen: the
         * internal-linkage names of block_sort.cu still varied). */
        snprintf(buf, sizeof(buf), "--frandom-seed=0x%02x%02x%02x%02x", r->pub.key.bytes[0],
                 r->pub.key.bytes[1], r->pub.key.bytes[2], r->pub.key.bytes[3]);
        rc = kc_strv_push(&a->opts, &a->n_opts, buf);
    }
    if (!rc)
        rc = kc_nvrtc_cache_option(&a->opts, &a->n_opts, &w->opts, req->flags);
    return rc;
}

/* NVRTC's log of prog into r (none when it has none). */
static int take_log(const kc_nvrtc *api, nvrtcProgram prog, struct kc_result *r)
{
    size_t log_size = 0;
    if (api->GetProgramLogSize(prog, &log_size) != NVRTC_SUCCESS || log_size <= 1)
        return 0;
    if (!(r->log = kc_malloc(log_size)))
        return KCACHE_ENOMEM;
    if (api->GetProgramLog(prog, r->log) != NVRTC_SUCCESS)
        r->log[0] = '\0';
    r->log[log_size - 1] = '\0';
    r->pub.log = r->log;
    return 0;
}

/* The artifact of w's kind, NUL-terminated, into r. */
static int take_output(const kc_nvrtc *api, nvrtcProgram prog, const struct work *w,
                       struct kc_result *r)
{
    size_t size = 0;
    nvrtcResult res;
    if (w->kind == KCACHE_KIND_CUBIN)
        res = api->GetCUBINSize(prog, &size);
    else if (w->kind == KCACHE_KIND_PTX)
        res = api->GetPTXSize(prog, &size);
    else
        res = api->GetLTOIRSize(prog, &size);
    if (res != NVRTC_SUCCESS || size == 0)
        return res != NVRTC_SUCCESS ? nvrtc_fail(r, api, res, "gave no output")
                                    : kc_result_fail(r, KCACHE_EIO, "NVRTC gave an empty %s",
                                                     kcache_kind_name(w->kind));
    if (!(r->data = kc_malloc(size + 1)))
        return KCACHE_ENOMEM;
    if (w->kind == KCACHE_KIND_CUBIN)
        res = api->GetCUBIN(prog, r->data);
    else if (w->kind == KCACHE_KIND_PTX)
        res = api->GetPTX(prog, r->data);
    else
        res = api->GetLTOIR(prog, r->data);
    if (res != NVRTC_SUCCESS)
        return nvrtc_fail(r, api, res, "gave no output");
    /* PTX comes NUL-terminated and its size counts the NUL: store the text. */
    if (w->kind == KCACHE_KIND_PTX && size > 0 && r->data[size - 1] == '\0')
        size--;
    r->data[size] = '\0';
    r->pub.data = r->data;
    r->pub.size = size;
    return 0;
}

/* The lowered name of each of the request's name expressions, into r. */
static int take_names(const kc_nvrtc *api, nvrtcProgram prog, const kcache_request *req,
                      struct kc_result *r)
{
    int rc = kc_result_names_begin(r, req->n_name_exprs);
    for (size_t i = 0; !rc && i < req->n_name_exprs; i++) {
        const char *lowered = NULL;
        nvrtcResult res = api->GetLoweredName(prog, req->name_exprs[i], &lowered);
        rc = res != NVRTC_SUCCESS
                 ? nvrtc_fail(r, api, res, "has no lowered name for a name expression")
                 : kc_result_add_name(r, req->name_exprs[i], lowered);
    }
    return rc;
}

/*
 * Runs NVRTC. Hermetic: the user headers go in memory under their spellings,
 * only the toolkit's -I directories are passed, and the source directory is
 * not searched. Otherwise (not cacheable) NVRTC reads from disk as usual.
 */
int kc_run_nvrtc(kcache_compiler *c, const kcache_request *req, const struct work *w,
                 struct kc_result *r, int hermetic)
{
    const kc_nvrtc *api;
    char msg[512];
    int rc = kc_nvrtc_get(&c->tk, &api, msg, sizeof(msg));
    if (rc)
        return kc_result_fail(r, rc, "%s", msg);
    struct nvrtc_args a;
    memset(&a, 0, sizeof(a));
    nvrtcProgram prog = NULL;
    if ((rc = nvrtc_headers(&a, c, req, w, r, hermetic)) ||
        (rc = nvrtc_options(&a, c, req, w, r, hermetic)))
        goto out;
    /* Not hermetic: let NVRTC find "quoted" headers beside the source file. */
    const char *name = !hermetic && req->source_path ? req->source_path : w->source_name;
    const char *source = hermetic && w->deps.source ? w->deps.source : w->source;
    nvrtcResult res = api->CreateProgram(&prog, source, name, (int)a.n_headers, a.contents,
                                         a.spellings);
    if (res != NVRTC_SUCCESS) {
        rc = nvrtc_fail(r, api, res, "could not take the program");
        goto out;
    }
    for (size_t i = 0; i < req->n_name_exprs; i++) {
        if ((res = api->AddNameExpression(prog, req->name_exprs[i])) != NVRTC_SUCCESS) {
            rc = nvrtc_fail(r, api, res, "refused a name expression");
            goto out;
        }
    }
    kc_nvrtc_note_options(a.n_opts, (const char *const *)a.opts);
    uint64_t t0 = kc_mono_ns();
    nvrtcResult compiled = api->CompileProgram(prog, (int)a.n_opts, (const char *const *)a.opts);
    r->pub.compile_ns = kc_mono_ns() - t0;
    if ((rc = take_log(api, prog, r)))
        goto out;
    if (compiled != NVRTC_SUCCESS) {
        rc = compiled == NVRTC_ERROR_COMPILATION
                 ? kc_result_compile_failed(r, w->source_name, c->tk.root)
             : compiled == NVRTC_ERROR_INVALID_OPTION ? invalid_option(r, api, w->nvrtc_arch)
                                                      : nvrtc_fail(r, api, compiled, "failed");
        goto out;
    }
    if (!(rc = take_output(api, prog, w, r)))
        rc = take_names(api, prog, req, r);
out:
    if (prog)
        api->DestroyProgram(&prog);
    nvrtc_args_free(&a);
    return rc;
}

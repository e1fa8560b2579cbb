/*
 * Rebuilding a stored entry from what was kept with it: the key material
 * says what the compile was (kind, target, options, name expressions, which
 * header each spelling named), the stored inputs give the bytes of the source
 * and of every user header. With NVRTC's bytes made reproducible by the seed
 * derived from the key, the rebuild must match the stored artifact exactly.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile/compileint.h"

struct recipe {
    char input[16], output[16], arch[32], nvrtc[128], nvjitlink[128], toolkit[4096];
    char source_name[1024];
    char **options;
    size_t n_options;
    char **exprs;
    size_t n_exprs;
    char **toolkit_dirs; /* derived from the toolkit headers, relative to the root */
    size_t n_toolkit_dirs;
    char **link_kinds;
    size_t n_link;
    int lto;
};

static void copy_field(char *dst, size_t size, const uint8_t *data, size_t n)
{
    size_t k = n < size - 1 ? n : size - 1;
    memcpy(dst, data, k);
    dst[k] = '\0';
}

/* "spelling\0toolkit\0include/cccl/cub/x.cuh" -> "include/cccl" */
static int toolkit_dir_of(struct recipe *rc, const uint8_t *data, size_t n)
{
    const char *spelling = (const char *)data;
    size_t sp = strnlen(spelling, n);
    if (sp + 1 >= n)
        return 0;
    const char *state = spelling + sp + 1;
    size_t st = strnlen(state, n - sp - 1);
    if (strncmp(state, "toolkit", st) != 0 || st != 7 || sp + st + 2 >= n)
        return 0;
    const char *rel = state + st + 1;
    size_t rl = n - sp - st - 2;
    if (rl <= sp || memcmp(rel + rl - sp, spelling, sp) != 0 || rel[rl - sp - 1] != '/')
        return 0;
    char dir[4096];
    if (rl - sp - 1 >= sizeof(dir))
        return 0;
    memcpy(dir, rel, rl - sp - 1);
    dir[rl - sp - 1] = '\0';
    for (size_t i = 0; i < rc->n_toolkit_dirs; i++)
        if (!strcmp(rc->toolkit_dirs[i], dir))
            return 0;
    return kc_strv_push(&rc->toolkit_dirs, &rc->n_toolkit_dirs, dir);
}

static int read_field(void *ud, int tag, const uint8_t *data, size_t n)
{
    struct recipe *rc = ud;
    char text[4096];
    copy_field(text, sizeof(text), data, n);
    switch (tag) {
    case KC_TAG_INPUT_KIND: copy_field(rc->input, sizeof(rc->input), data, n); return 0;
    case KC_TAG_OUTPUT_KIND: copy_field(rc->output, sizeof(rc->output), data, n); return 0;
    case KC_TAG_ARCH: copy_field(rc->arch, sizeof(rc->arch), data, n); return 0;
    case KC_TAG_NVRTC: copy_field(rc->nvrtc, sizeof(rc->nvrtc), data, n); return 0;
    case KC_TAG_NVJITLINK: copy_field(rc->nvjitlink, sizeof(rc->nvjitlink), data, n); return 0;
    case KC_TAG_TOOLKIT: copy_field(rc->toolkit, sizeof(rc->toolkit), data, n); return 0;
    case KC_TAG_SOURCE_NAME:
        copy_field(rc->source_name, sizeof(rc->source_name), data, n);
        return 0;
    case KC_TAG_OPTION:
        if (!strcmp(text, "-lto") && !strcmp(rc->input, "link")) {
            rc->lto = 1;
            return 0;
        }
        return kc_strv_push(&rc->options, &rc->n_options, text);
    case KC_TAG_NAME_EXPR: return kc_strv_push(&rc->exprs, &rc->n_exprs, text);
    case KC_TAG_HEADER: return toolkit_dir_of(rc, data, n);
    case KC_TAG_LINK_INPUT: return kc_strv_push(&rc->link_kinds, &rc->n_link, text);
    default: return 0;
    }
}

static void recipe_free(struct recipe *rc)
{
    kc_strv_free(rc->options, rc->n_options);
    kc_strv_free(rc->exprs, rc->n_exprs);
    kc_strv_free(rc->toolkit_dirs, rc->n_toolkit_dirs);
    kc_strv_free(rc->link_kinds, rc->n_link);
}

static int rebuild_source(kcache_compiler *c, const kcache_entry *e, struct recipe *rc,
                          struct kc_result *r)
{
    if (strcmp(rc->nvrtc, c->tk.nvrtc_id) != 0 || strcmp(rc->toolkit, c->tk.identity) != 0)
        return kc_result_fail(r, KCACHE_ENOTSUP,
                              "made by another toolchain (%s); this one is %s", rc->nvrtc,
                              c->tk.nvrtc_id);
    struct work w;
    memset(&w, 0, sizeof(w));
    int rc_ = 0;
    for (size_t i = 0; i < e->n_inputs; i++) {
        const kcache_input *in = &e->inputs[i];
        if (in->role == KCACHE_INPUT_SOURCE) {
            w.source = in->data;
            w.source_size = in->size;
        } else if (in->role == KCACHE_INPUT_HEADER) {
            kc_dep *grown = kc_realloc(w.deps.deps, (w.deps.n_deps + 1) * sizeof(*grown));
            if (!grown) {
                rc_ = KCACHE_ENOMEM;
                goto out;
            }
            w.deps.deps = grown;
            kc_dep *d = &w.deps.deps[w.deps.n_deps++];
            memset(d, 0, sizeof(*d));
            d->state = KC_DEP_USER;
            d->spelling = kc_strdup(in->name);
            d->content = kc_memdup(in->data, in->size);
            d->size = in->size;
            if (!d->spelling || !d->content) {
                rc_ = KCACHE_ENOMEM;
                goto out;
            }
        }
    }
    if (!w.source) {
        rc_ = kc_result_fail(r, KCACHE_ENOTSUP, "its source was not kept");
        goto out;
    }
    w.source_name = rc->source_name;
    snprintf(w.nvrtc_arch, sizeof(w.nvrtc_arch), "%s", rc->arch);
    snprintf(r->arch, sizeof(r->arch), "%s", rc->arch);
    if (kcache_kind_parse(&w.kind, rc->output) != 0) {
        rc_ = kc_result_fail(r, KCACHE_ECORRUPT, "its key names no output kind");
        goto out;
    }
    for (size_t i = 0; i < rc->n_options && !rc_; i++) {
        rc_ = kc_strv_push(&w.opts.canonical, &w.opts.n_canonical, rc->options[i]);
        if (!strncmp(rc->options[i], "--frandom-seed=", 15))
            w.opts.has_seed = 1;
    }
    for (size_t i = 0; i < rc->n_toolkit_dirs && !rc_; i++) {
        char dir[8192];
        snprintf(dir, sizeof(dir), "%s/%s", c->tk.root, rc->toolkit_dirs[i]);
        rc_ = kc_strv_push(&w.opts.include_dirs, &w.opts.n_include_dirs, dir);
    }
    if (rc_)
        goto out;
    kcache_request req = KCACHE_REQUEST_INIT;
    req.name_exprs = (const char *const *)rc->exprs;
    req.n_name_exprs = rc->n_exprs;
    r->pub.key = e->key; /* the seed comes from it */
    r->pub.kind = w.kind;
    rc_ = kc_run_nvrtc(c, &req, &w, r, 1);
out:
    /* w's source and name point into e and rc: only what it owns goes. */
    w.source = NULL;
    kc_work_free(&w);
    return rc_;
}

static int rebuild_link(kcache_compiler *c, const kcache_entry *e, struct recipe *rc,
                        struct kc_result *r)
{
    if (strcmp(rc->nvjitlink, c->tk.nvjitlink_id) != 0)
        return kc_result_fail(r, KCACHE_ENOTSUP, "linked by another nvJitLink (%s)",
                              rc->nvjitlink);
    if (rc->n_link != e->n_inputs)
        return kc_result_fail(r, KCACHE_ENOTSUP, "its link inputs were not kept");
    kcache_link_input *in = kc_calloc(e->n_inputs + 1, sizeof(*in));
    if (!in)
        return KCACHE_ENOMEM;
    for (size_t i = 0; i < e->n_inputs; i++) {
        kcache_kind kind = KCACHE_KIND_CUBIN;
        kcache_kind_parse(&kind, rc->link_kinds[i]); /* "kind" then NUL then digest */
        in[i] = (kcache_link_input){NULL, kind, e->inputs[i].data, e->inputs[i].size,
                                    e->inputs[i].name};
    }
    kcache_link_request lr = KCACHE_LINK_REQUEST_INIT;
    lr.arch = rc->arch;
    lr.lto = rc->lto;
    lr.n_inputs = e->n_inputs;
    lr.options = (const char *const *)rc->options;
    lr.n_options = rc->n_options;
    snprintf(r->arch, sizeof(r->arch), "%s", rc->arch);
    r->pub.kind = KCACHE_KIND_CUBIN;
    int rc_ = kc_run_link(c, &lr, in, r);
    free(in);
    return rc_;
}

KCACHE_API int kcache_recompile(kcache_result **out, int *same, kcache_compiler *compiler,
                                const kcache_key *key)
{
    if (out)
        *out = NULL;
    if (!compiler || !key || !same)
        return KCACHE_EINVAL;
    *same = 0;
    struct kc_result *r = kc_result_new();
    if (!r)
        return KCACHE_ENOMEM;
    struct recipe rc;
    memset(&rc, 0, sizeof(rc));
    kcache_entry *e = NULL;
    int status;
    uint64_t t0 = kc_mono_ns();
    if (!compiler->store) {
        status = kc_result_fail(r, KCACHE_EINVAL, "no store to read the entry from");
        goto out;
    }
    status = kcache_store_get(&e, compiler->store, key, KCACHE_GET_NO_TOUCH | KCACHE_GET_INPUTS);
    if (status) {
        kc_result_fail(r, status, "%s", kcache_store_errmsg(compiler->store));
        goto out;
    }
    r->pub.key = *key;
    status = kc_key_walk(e->key_material, e->key_material_size, read_field, &rc);
    if (status == KCACHE_ECORRUPT) {
        kc_result_fail(r, status, "its key material does not parse");
        goto out;
    }
    if (status)
        goto out;
    if (!strcmp(rc.input, "cuda"))
        status = rebuild_source(compiler, e, &rc, r);
    else if (!strcmp(rc.input, "link"))
        status = rebuild_link(compiler, e, &rc, r);
    else
        status = kc_result_fail(r, KCACHE_ENOTSUP, "it was not made by a compile kcache knows");
    if (!status)
        *same = r->pub.size == e->size && memcmp(r->pub.data, e->data, e->size) == 0;
out:
    recipe_free(&rc);
    kcache_entry_free(e);
    r->pub.status = status;
    r->pub.elapsed_ns = kc_mono_ns() - t0;
    if (out)
        *out = &r->pub;
    else
        kcache_result_free(&r->pub);
    return status;
}

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


/* What the key names as the compile's bytes: the source's digest, and each user header's field. */
struct named_inputs {
    const uint8_t *source; /* KC_DIGEST_SIZE bytes, or NULL */
    const uint8_t *field[4096];
    size_t field_size[4096];
    size_t n;
    int overflow;
};

static int collect_named(void *ud, int tag, const uint8_t *data, size_t n)
{
    struct named_inputs *ni = ud;
    if (tag == KC_TAG_SOURCE && n == KC_DIGEST_SIZE)
        ni->source = data;
    if (tag == KC_TAG_HEADER) {
        if (ni->n == KC_ARRAY_SIZE(ni->field)) {
            ni->overflow = 1;
            return 0;
        }
        ni->field[ni->n] = data;
        ni->field_size[ni->n++] = n;
    }
    return 0;
}

/*
 * Whether every input kept with e is one its key names, by content: the
 * source by its digest, each user header as "name NUL file NUL digest hex"
 * (compile/key.c). A rebuild is only evidence of what a key builds when it
 * reads what the key covers; an entry whose kept source is another's (a
 * bundle may carry both the artifact and the inputs of another kernel)
 * would otherwise "confirm" itself.
 */
static int inputs_named_by_key(const kcache_entry *e)
{
    struct named_inputs *ni = kc_calloc(1, sizeof(*ni));
    if (!ni)
        return KCACHE_ENOMEM;
    int ok = kc_key_walk(e->key_material, e->key_material_size, collect_named, ni) == 0 &&
             !ni->overflow;
    for (size_t i = 0; ok && i < e->n_inputs; i++) {
        const kcache_input *in = &e->inputs[i];
        uint8_t d[KC_DIGEST_SIZE];
        kc_digest(d, in->data, in->size);
        if (in->role == KCACHE_INPUT_SOURCE) {
            ok = ni->source && !memcmp(ni->source, d, KC_DIGEST_SIZE);
        } else if (in->role == KCACHE_INPUT_HEADER) {
            char want[4096 + 2 * KC_DIGEST_SIZE + 16];
            int n = snprintf(want, sizeof(want), "%s%cfile%c", in->name ? in->name : "", 0, 0);
            for (int j = 0; n > 0 && j < KC_DIGEST_SIZE && (size_t)n + 3 < sizeof(want); j++)
                n += snprintf(want + n, sizeof(want) - (size_t)n, "%02x", d[j]);
            int found = 0;
            for (size_t k = 0; !found && n > 0 && k < ni->n; k++)
                found = ni->field_size[k] == (size_t)n && !memcmp(ni->field[k], want, (size_t)n);
            ok = found;
        }
    }
    free(ni);
    return ok;
}

/*
 * 0 if NVRTC's environment variables here are what the entry was made under
 * (compile/nvenv.c): a rebuild runs in this process's environment.
 */
static int same_environment(kcache_compiler *c, const kc_recipe *rc, struct kc_result *r)
{
    kc_nvenv env;
    int status = kc_nvenv_get(&env, &c->tk, c->store);
    if (status)
        return kc_result_fail(r, status, "out of memory");
    if (!strcmp(env.reason, "nvrtc_environment_unknown")) {
        status = kc_result_fail(r, KCACHE_ENOTSUP, "%s", env.problem);
        kc_nvenv_free(&env);
        return status;
    }
    int same = env.n_set == rc->n_env;
    for (size_t i = 0; same && i < env.n_set; i++)
        same = !strcmp(env.set[i], rc->env[i]);
    if (!same)
        status = kc_result_fail(r, KCACHE_ENOTSUP,
                                "it was made with %s%s set, and this environment differs: rebuild "
                                "it where that holds",
                                rc->n_env ? rc->env[0] : "none of NVRTC's variables",
                                rc->n_env > 1 ? " (and more)" : "");
    kc_nvenv_free(&env);
    return status;
}

/* The toolkit's directories as spelled (format 7), and each header under the path its
 * key holds: as the entry was made. 0 or KCACHE_ENOMEM. */
static int paths_as_keyed(struct work *w, const kc_recipe *rc)
{
    if (rc->n_tk_spelled == w->n_tk_dirs && w->n_tk_dirs) {
        if (!(w->tk_spelled = kc_calloc(w->n_tk_dirs, sizeof(char *))))
            return KCACHE_ENOMEM;
        for (size_t i = 0; i < w->n_tk_dirs; i++)
            if (!(w->tk_spelled[i] = kc_strdup(rc->tk_spelled[i])))
                return KCACHE_ENOMEM;
    }
    for (size_t i = 0; i + 1 < rc->n_header_paths; i += 2)
        for (size_t j = 0; j < w->deps.n_deps; j++)
            if (!w->deps.deps[j].nvpath && !strcmp(w->deps.deps[j].name, rc->header_paths[i]) &&
                !(w->deps.deps[j].nvpath = kc_strdup(rc->header_paths[i + 1])))
                return KCACHE_ENOMEM;
    return 0;
}

static int rebuild_source(kcache_compiler *c, const kcache_entry *e, kc_recipe *rc,
                          struct kc_result *r)
{
    int named = inputs_named_by_key(e);
    if (named < 0)
        return kc_result_fail(r, named, "out of memory");
    if (!named)
        return kc_result_fail(r, KCACHE_ECORRUPT,
                              "its kept source or headers are not the ones its key names");
    if (strcmp(rc->nvrtc, c->tk.nvrtc_id) != 0 || strcmp(rc->toolkit, c->tk.identity) != 0)
        return kc_result_fail(r, KCACHE_ENOTSUP,
                              "made by another toolchain (%s); this one is %s", rc->nvrtc,
                              c->tk.nvrtc_id);
    struct work w;
    memset(&w, 0, sizeof(w));
    if (rc->workdir[0]) {
        /* Line information and LTO-IR hold the directory it was made in: only there
         * is it the same. */
        char here[PATH_MAX];
        kc_nvrtc_workdir(here, sizeof(here));
        if (strcmp(here, rc->workdir) != 0)
            return kc_result_fail(r, KCACHE_ENOTSUP,
                                  "its bytes name the directory it was made in, %s: rebuild "
                                  "it from there", rc->workdir);
    }
    int rc_ = 0;
    for (size_t i = 0; i < e->n_inputs; i++) {
        const kcache_input *in = &e->inputs[i];
        if (in->role == KCACHE_INPUT_SOURCE) {
            w.source = in->data;
            w.source_size = in->size;
            /* Keyed without its name (compile/progname.c): any gives its bytes. */
            if (!rc->source_name[0])
                snprintf(rc->source_name, sizeof(rc->source_name), "%s", in->name);
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
            d->name = kc_strdup(in->name);
            d->content = kc_memdup(in->data, in->size);
            d->size = in->size;
            if (!d->name || !d->content) {
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
    for (size_t i = 0; i < rc->n_handed && !rc_; i++)
        rc_ = kc_strv_push(&w.deps.handed, &w.deps.n_handed, rc->handed[i]);
    /* The key's toolkit directories (none is none); before format 4, those its toolkit
     * headers were found in. */
    char **dirs = rc->format >= 4 ? rc->tk_dirs : rc->toolkit_dirs;
    size_t n_dirs = rc->format >= 4 ? rc->n_tk_dirs : rc->n_toolkit_dirs;
    for (size_t i = 0; i < n_dirs && !rc_; i++)
        rc_ = kc_strv_push(&w.tk_dirs, &w.n_tk_dirs, dirs[i]);
    if (!rc_)
        rc_ = paths_as_keyed(&w, rc);
    if (rc_)
        goto out;
    kcache_request req = KCACHE_REQUEST_INIT;
    req.name_exprs = (const char *const *)rc->exprs;
    req.n_name_exprs = rc->n_exprs;
    r->pub.key = e->key; /* the seed comes from it */
    r->pub.kind = w.kind;
    rc_ = kc_run_nvrtc(c, &req, &w, r, 1);
    if (!rc_ && !kc_nvrtc_loaded_is_keyed(&c->tk))
        rc_ = kc_result_fail(r, KCACHE_ENOTSUP, "%s", KC_LOADED_IS_ANOTHER_BUILD);
out:
    /* w's source and name point into e and rc: only what it owns goes. */
    w.source = NULL;
    kc_work_free(&w);
    return rc_;
}

static int rebuild_link(kcache_compiler *c, const kcache_entry *e, kc_recipe *rc,
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
    if (!rc_ && !kc_nvjitlink_loaded_is_keyed(&c->tk))
        rc_ = kc_result_fail(r, KCACHE_ENOTSUP, "the nvJitLink this process loaded is another "
                                                "build than its file now: run verify again");
    return rc_;
}

KCACHE_API int kcache_compiler_recompile(kcache_result **out, int *same, kcache_compiler *compiler,
                                         const kcache_key *key)
{
    struct kc_result *r;
    uint64_t t0;
    if (!same)
        return KCACHE_EINVAL;
    *same = 0;
    int status = kc_result_start(&r, &t0, out, compiler, key);
    if (status)
        return status;
    kc_recipe rc;
    memset(&rc, 0, sizeof(rc)); /* freed at out: even when decoding is not reached */
    kcache_entry *e = NULL;
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
    status = kc_key_decode(&rc, e->key_material, e->key_material_size);
    if (status == KCACHE_ECORRUPT) {
        kc_result_fail(r, status, "its key material does not parse");
        goto out;
    }
    if (status)
        goto out;
    if (!strcmp(rc.input, "cuda") && (status = same_environment(compiler, &rc, r)))
        goto out;
    if (!strcmp(rc.input, "cuda") && kc_dropin_made(e))
        status = kc_rebuild_dropin(compiler, e, &rc, r);
    else if (!strcmp(rc.input, "cuda"))
        status = rebuild_source(compiler, e, &rc, r);
    else if (!strcmp(rc.input, "link"))
        status = rebuild_link(compiler, e, &rc, r);
    else
        status = kc_result_fail(r, KCACHE_ENOTSUP, "%s",
                                e->kind != KCACHE_KIND_DATA
                                    ? "it was not made by a compile kcache knows"
                                /* The namespace lib/nvrtc-shim/facts.c writes. */
                                : !strcmp(e->arch, "kcache.nvrtc")
                                    ? "the drop-in's record of what its NVRTC says of itself: "
                                      "nothing to recompile"
                                    : "a caller stored it under its own key: nothing to recompile");
    if (!status)
        *same = r->pub.size == e->size && memcmp(r->pub.data, e->data, e->size) == 0;
out:
    kc_recipe_free(&rc);
    kcache_entry_free(e);
    return kc_result_finish(r, status, t0, out);
}

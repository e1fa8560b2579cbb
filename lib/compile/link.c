/*
 * Linking with nvJitLink, every step through the cache: each source is
 * compiled (and cached) on its own, then the link is keyed by nvJitLink's
 * identity, its options and the digest of every input, in order.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile/compileint.h"

struct link_input {
    kcache_result *compiled; /* owns the bytes when the input was a source */
    kcache_kind kind;
    const void *data;
    size_t size;
    const char *name;
};

static nvJitLinkInputType input_type(kcache_kind kind)
{
    switch (kind) {
    case KCACHE_KIND_PTX: return NVJITLINK_INPUT_PTX;
    case KCACHE_KIND_LTOIR: return NVJITLINK_INPUT_LTOIR;
    default: return NVJITLINK_INPUT_CUBIN;
    }
}

/* Compiles a source input for linking: relocatable, to LTO-IR when linking with LTO. */
static int compile_input(kcache_compiler *c, const kcache_link_request *req,
                         const kcache_link_input *in, struct link_input *out,
                         struct kc_result *r)
{
    kcache_request sub = *in->request;
    const char **opts = kc_calloc(sub.n_options + 1, sizeof(char *));
    if (!opts)
        return KCACHE_ENOMEM;
    for (size_t i = 0; i < sub.n_options; i++)
        opts[i] = sub.options[i];
    opts[sub.n_options] = "--relocatable-device-code=true";
    sub.options = opts;
    sub.n_options++;
    sub.arch = req->arch;
    sub.output = req->lto ? KCACHE_KIND_LTOIR : KCACHE_KIND_CUBIN;
    sub.flags = req->flags & ~(unsigned)KCACHE_COMPILE_KEY_ONLY;
    int rc = kcache_compiler_compile(&out->compiled, c, &sub);
    free(opts);
    if (rc) {
        if (out->compiled) {
            /* The caller sees the failing step's log and message. */
            snprintf(r->message, sizeof(r->message), "%s", out->compiled->message);
            const char *log = out->compiled->log;
            if (log && *log && !(r->log = kc_strdup(log)))
                return KCACHE_ENOMEM;
            if (r->log)
                r->pub.log = r->log;
        }
        return rc;
    }
    out->kind = out->compiled->kind;
    out->data = out->compiled->data;
    out->size = out->compiled->size;
    out->name = in->request->source_path ? in->request->source_path
                : in->request->source_name ? in->request->source_name
                                           : "kernel.cu";
    return 0;
}

static int link_key(kcache_compiler *c, const kcache_link_request *req,
                    const struct link_input *in, struct kc_result *r)
{
    size_t n = req->n_inputs;
    kcache_kind *kinds = kc_calloc(n, sizeof(*kinds));
    const void **data = kc_calloc(n, sizeof(*data));
    size_t *sizes = kc_calloc(n, sizeof(*sizes));
    int rc = KCACHE_ENOMEM;
    if (kinds && data && sizes) {
        for (size_t i = 0; i < n; i++) {
            kinds[i] = in[i].kind;
            data[i] = in[i].data;
            sizes[i] = in[i].size;
        }
        kc_key_link k = {r->arch, c->tk.nvjitlink_id, req->lto, req->options, req->n_options,
                         n, kinds, data, sizes};
        if (!(rc = kc_key_encode_link(&r->material, &r->pub.key, &k)))
            kc_result_keyed(r);
    }
    free(kinds);
    free(data);
    free(sizes);
    return rc;
}

static int jitlink_log(struct kc_result *r, const kc_nvjitlink *api, nvJitLinkHandle h)
{
    size_t n = 0;
    if (api->GetErrorLogSize(h, &n) != NVJITLINK_SUCCESS || n <= 1)
        return 0;
    free(r->log);
    if (!(r->log = kc_malloc(n + 1)))
        return KCACHE_ENOMEM;
    if (api->GetErrorLog(h, r->log) != NVJITLINK_SUCCESS)
        r->log[0] = '\0';
    r->log[n] = '\0';
    r->pub.log = r->log;
    return 0;
}

int kc_run_link(kcache_compiler *c, const kcache_link_request *req, const kcache_link_input *in,
                struct kc_result *r)
{
    const kc_nvjitlink *api;
    char msg[512], arch_opt[48];
    int rc = kc_nvjitlink_get(&c->tk, &api, msg, sizeof(msg));
    if (rc)
        return kc_result_fail(r, rc, "%s", msg);
    const char **opts = kc_calloc(req->n_options + 2, sizeof(char *));
    if (!opts)
        return KCACHE_ENOMEM;
    size_t n_opts = 0;
    snprintf(arch_opt, sizeof(arch_opt), "-arch=%s", r->arch);
    opts[n_opts++] = arch_opt;
    if (req->lto)
        opts[n_opts++] = "-lto";
    for (size_t i = 0; i < req->n_options; i++)
        if (req->options[i])
            opts[n_opts++] = req->options[i];
    nvJitLinkHandle h = NULL;
    nvJitLinkResult res = api->Create(&h, (uint32_t)n_opts, opts);
    free(opts);
    if (res != NVJITLINK_SUCCESS) {
        rc = kc_result_fail(r, KCACHE_EINVAL, "nvJitLink refused the options (error %d)",
                            (int)res);
        goto out;
    }
    for (size_t i = 0; i < req->n_inputs; i++) {
        res = api->AddData(h, input_type(in[i].kind), in[i].data, in[i].size, in[i].name);
        if (res != NVJITLINK_SUCCESS) {
            jitlink_log(r, api, h);
            rc = kc_result_fail(r, KCACHE_ECOMPILE, "nvJitLink refused input %s (error %d)",
                                in[i].name, (int)res);
            goto out;
        }
    }
    uint64_t t0 = kc_mono_ns();
    res = api->Complete(h);
    r->pub.compile_ns = kc_mono_ns() - t0;
    if ((rc = jitlink_log(r, api, h)))
        goto out;
    if (res != NVJITLINK_SUCCESS) {
        rc = kc_result_fail(r, KCACHE_ECOMPILE, "the link failed (see the log)");
        goto out;
    }
    size_t size = 0;
    if (api->GetLinkedCubinSize(h, &size) != NVJITLINK_SUCCESS || size == 0) {
        rc = kc_result_fail(r, KCACHE_EIO, "nvJitLink gave no CUBIN");
        goto out;
    }
    if (!(r->data = kc_malloc(size + 1))) {
        rc = KCACHE_ENOMEM;
        goto out;
    }
    if (api->GetLinkedCubin(h, r->data) != NVJITLINK_SUCCESS) {
        rc = kc_result_fail(r, KCACHE_EIO, "nvJitLink gave no CUBIN");
        goto out;
    }
    r->data[size] = '\0';
    r->pub.data = r->data;
    r->pub.size = size;
out:
    if (h)
        api->Destroy(&h);
    return rc;
}

static void store_link(kcache_compiler *c, const kcache_link_request *req,
                       const struct link_input *in, struct kc_result *r)
{
    const kc_nvjitlink *api = NULL;
    char toolchain[256], ignored[64], name[512];
    kc_nvjitlink_get(&c->tk, &api, ignored, sizeof(ignored));
    snprintf(toolchain, sizeof(toolchain), "nvJitLink %u.%u (%s)", api ? api->major : 0,
             api ? api->minor : 0, c->tk.nvjitlink_id);
    kcache_input *inputs = kc_calloc(req->n_inputs, sizeof(*inputs));
    if (!inputs) {
        kc_result_store_problem(r, KCACHE_ENOMEM, "out of memory storing the link");
        kc_store_count_failure(c->store);
        return;
    }
    for (size_t i = 0; i < req->n_inputs; i++)
        inputs[i] = (kcache_input){KCACHE_INPUT_LINK, in[i].name, in[i].data, in[i].size};
    const char *first = strrchr(in[0].name, '/');
    snprintf(name, sizeof(name), "link:%s%s", first ? first + 1 : in[0].name,
             req->n_inputs > 1 ? "+" : "");
    kc_store_result(c, r, name, toolchain, inputs, req->n_inputs);
    free(inputs);
}

/* A link as a step of kc_through_cache(). */
struct link_step {
    kcache_compiler *c;
    const kcache_link_request *req;
    const struct link_input *in;
    const kcache_link_input *bytes;
};

static int run_link_step(void *ctx, struct kc_result *r)
{
    struct link_step *s = ctx;
    return kc_run_link(s->c, s->req, s->bytes, r);
}

static void store_link_step(void *ctx, struct kc_result *r)
{
    struct link_step *s = ctx;
    if (!kc_nvjitlink_loaded_is_keyed(&s->c->tk)) {
        /* The link was another build's than the key says: returned, not kept. */
        kc_result_store_problem(r, KCACHE_ENOTSUP, "not stored: nvJitLink is another build "
                                                   "than when kcache opened (replaced since)");
        return;
    }
    store_link(s->c, s->req, s->in, r);
}

static int link_steps(kcache_compiler *c, const kcache_link_request *req, struct kc_result *r,
                      struct link_input *in)
{
    char msg[KC_ERRMSG_SIZE];
    int rc = kc_version_check(msg, sizeof(msg), "kcache_link_request", req->version,
                              KCACHE_LINK_REQUEST_VERSION);
    if (rc)
        return kc_result_fail(r, rc, "%s", msg);
    if (!req->n_inputs || !req->inputs)
        return kc_result_fail(r, KCACHE_EINVAL, "a link needs at least one input");
    if (req->n_options && !req->options)
        return kc_result_fail(r, KCACHE_EINVAL, "n_options without options");
    if (!req->arch || kcache_arch_normalize(r->arch, sizeof(r->arch), req->arch) != 0 ||
        strncmp(r->arch, "sm_", 3) != 0)
        return kc_result_fail(r, KCACHE_EINVAL,
                              "a link needs a real architecture such as sm_90 (got '%s')",
                              req->arch ? req->arch : "none");
    r->pub.kind = KCACHE_KIND_CUBIN;
    for (size_t i = 0; i < req->n_inputs; i++) {
        const kcache_link_input *src = &req->inputs[i];
        if (src->request) {
            if ((rc = compile_input(c, req, src, &in[i], r)))
                return rc;
            continue;
        }
        if (!src->data || !src->size || src->kind < KCACHE_KIND_CUBIN ||
            src->kind > KCACHE_KIND_LTOIR)
            return kc_result_fail(r, KCACHE_EINVAL,
                                  "link input %zu has neither a request nor PTX, LTO-IR or "
                                  "CUBIN bytes",
                                  i);
        in[i].kind = src->kind;
        in[i].data = src->data;
        in[i].size = src->size;
        in[i].name = src->name ? src->name : "input";
    }
    if ((rc = link_key(c, req, in, r)) || (req->flags & KCACHE_COMPILE_KEY_ONLY))
        return rc;
    /* Without a build-id, nothing tells this nvJitLink from another build of its
     * name (compile.c says the same of NVRTC): linked, not kept. */
    int unknown = kc_toolkit_id_unknown(c->tk.nvjitlink_id);
    r->pub.keyed = !unknown;
    int use_store = c->store && !unknown && !(req->flags & KCACHE_COMPILE_NO_CACHE);
    if (unknown)
        kc_result_store_problem(r, KCACHE_ENOTSUP, "nvJitLink has no GNU build-id to tell its "
                                                   "build from another's; linked without the "
                                                   "cache");
    else if (!c->store)
        kc_result_store_problem(r, c->store_status, c->store_message);
    kcache_link_input *bytes = kc_calloc(req->n_inputs, sizeof(*bytes));
    if (!bytes)
        return KCACHE_ENOMEM;
    for (size_t i = 0; i < req->n_inputs; i++)
        bytes[i] = (kcache_link_input){NULL, in[i].kind, in[i].data, in[i].size, in[i].name};
    struct link_step ctx = {c, req, in, bytes};
    struct kc_step step = {run_link_step, store_link_step, &ctx, r->arch, KCACHE_KIND_CUBIN,
                           NULL, NULL};
    rc = kc_through_cache(c, r, use_store, req->flags, &step);
    free(bytes);
    return rc;
}

/* The inputs compiled on the way are the link's to free. */
static int link_request(kcache_compiler *c, const void *request, struct kc_result *r)
{
    const kcache_link_request *req = request;
    struct link_input *in = kc_calloc(req->n_inputs + 1, sizeof(*in));
    if (!in)
        return KCACHE_ENOMEM;
    int rc = link_steps(c, req, r, in);
    for (size_t i = 0; i < req->n_inputs; i++)
        kcache_result_free(in[i].compiled);
    free(in);
    return rc;
}

KCACHE_API int kcache_compiler_link(kcache_result **out, kcache_compiler *compiler,
                                    const kcache_link_request *request)
{
    return kc_result_run(out, compiler, request, "(link)", link_request);
}

/*
 * Rebuilding an entry the drop-in NVRTC made (lib/nvrtc-shim/shim.c), with
 * the NVRTC that made it, for `kcache verify --recompile`.
 *
 * Decisions:
 *   - What is kept with such an entry: the program's source and the headers
 *     it handed nvrtcCreateProgram in memory (KCACHE_COMPILE_KEEP_INPUTS),
 *     deduplicated and compressed like every input. Not the headers NVIDIA's
 *     NVRTC read from disk: they are read again, and only used when they are
 *     still what the key says (below). The options verbatim and the
 *     in-memory headers' names are in the key's extra digest already (the
 *     drop-in writes them there, extra_material() in shim.c), the name
 *     expressions and the source's name in the key.
 *   - The rebuild makes the drop-in's request again from those, and has
 *     kcache derive its key, now, with the NVRTC file the entry's toolchain
 *     names. Only when that key is the entry's key does it compile: the key
 *     covers the source, every header in memory and on disk by content,
 *     NVRTC's build, the toolkit and the options, so NVIDIA's NVRTC, given
 *     the program's own arguments and reading the disk as it did, is then
 *     given exactly what made the entry, and must give its bytes. A key that
 *     differs is a skip that says why (a header changed or is not found from
 *     this directory, another NVRTC build), never a verdict on the entry.
 *   - The extra digest's layout is shim.c's: a change there shows here as a
 *     key that does not match, a skip, never a false verdict.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile/compileint.h"

/* The first field of the drop-in's extra digest (shim.c, extra_material). */
#define KC_DROPIN_EXTRA "kcache nvrtc drop-in 2"

struct extra_field {
    const uint8_t *data;
    size_t size;
};

static int find_extra(void *ud, int tag, const uint8_t *data, size_t n)
{
    struct extra_field *x = ud;
    if (tag == KC_TAG_EXTRA) {
        x->data = data;
        x->size = n;
    }
    return 0;
}

int kc_dropin_made(const kcache_entry *e)
{
    struct extra_field x = {NULL, 0};
    kc_key_walk(e->key_material, e->key_material_size, find_extra, &x);
    return x.data && x.size > sizeof(KC_DROPIN_EXTRA) &&
           !memcmp(x.data, KC_DROPIN_EXTRA, sizeof(KC_DROPIN_EXTRA));
}

/* The drop-in's compile of one kept program, as the program asked. */
struct dropin_compile {
    const kc_toolkit *tk;
    const char *source, *name;
    size_t n_headers;
    const char *const *header_names, *const *header_contents;
    size_t n_exprs;
    const char *const *exprs;
    size_t n_opts;
    const char *const *opts;
    kcache_kind kind;
    char *log, *data;
    const char **lowered;
    char toolchain[96];
    nvrtcProgram prog;
    const kc_nvrtc *api;
};

static int compile_as_asked(void *userdata, kcache_made *made)
{
    struct dropin_compile *d = userdata;
    char msg[512];
    const kc_nvrtc *api;
    if (kc_nvrtc_get(d->tk, &api, msg, sizeof(msg)) != 0)
        return KCACHE_ENOTSUP;
    d->api = api;
    if (api->CreateProgram(&d->prog, d->source, d->name, (int)d->n_headers, d->header_contents,
                           d->header_names) != NVRTC_SUCCESS)
        return KCACHE_EIO;
    for (size_t i = 0; i < d->n_exprs; i++)
        api->AddNameExpression(d->prog, d->exprs[i]);
    kc_nvrtc_note_options(d->n_opts, d->opts);
    nvrtcResult rc = api->CompileProgram(d->prog, (int)d->n_opts, d->opts);
    size_t size = 0;
    if (api->GetProgramLogSize(d->prog, &size) == NVRTC_SUCCESS && size &&
        (d->log = kc_malloc(size)) && api->GetProgramLog(d->prog, d->log) == NVRTC_SUCCESS)
        d->log[size - 1] = '\0';
    made->log = d->log;
    if (rc != NVRTC_SUCCESS)
        return rc == NVRTC_ERROR_COMPILATION ? KCACHE_ECOMPILE : KCACHE_EIO;
    size = 0;
    nvrtcResult src = d->kind == KCACHE_KIND_CUBIN ? api->GetCUBINSize(d->prog, &size)
                      : d->kind == KCACHE_KIND_PTX ? api->GetPTXSize(d->prog, &size)
                                                   : api->GetLTOIRSize(d->prog, &size);
    if (src != NVRTC_SUCCESS || !size || !(d->data = kc_malloc(size)))
        return KCACHE_EIO;
    src = d->kind == KCACHE_KIND_CUBIN ? api->GetCUBIN(d->prog, d->data)
          : d->kind == KCACHE_KIND_PTX ? api->GetPTX(d->prog, d->data)
                                       : api->GetLTOIR(d->prog, d->data);
    if (src != NVRTC_SUCCESS)
        return KCACHE_EIO;
    /* Kept as the drop-in keeps it: PTX without its NUL. */
    if (d->kind == KCACHE_KIND_PTX && d->data[size - 1] == '\0')
        size--;
    if (!(d->lowered = kc_calloc(d->n_exprs + 1, sizeof(*d->lowered))))
        return KCACHE_ENOMEM;
    for (size_t i = 0; i < d->n_exprs; i++)
        if (api->GetLoweredName(d->prog, d->exprs[i], &d->lowered[i]) != NVRTC_SUCCESS)
            return KCACHE_EIO;
    snprintf(d->toolchain, sizeof(d->toolchain), "nvrtc %d.%d (recompile)", api->major,
             api->minor);
    made->data = d->data;
    made->size = size;
    made->n_names = d->n_exprs;
    made->name_exprs = d->exprs;
    made->lowered_names = d->lowered;
    made->toolchain = d->toolchain;
    return 0;
}

static void dropin_compile_free(struct dropin_compile *d)
{
    if (d->prog && d->api)
        d->api->DestroyProgram(&d->prog);
    free(d->log);
    free(d->data);
    free(d->lowered);
}

/* The NVRTC file an entry's toolchain names ("nvrtc X.Y (drop-in, PATH)"), or 0. */
static int made_with(char *path, size_t size, const char *toolchain)
{
    int major, minor, at = 0;
    if (!toolchain || sscanf(toolchain, "nvrtc %d.%d (drop-in, %n", &major, &minor, &at) != 2 ||
        !at)
        return 0;
    size_t n = strlen(toolchain + at);
    if (n < 2 || toolchain[at + n - 1] != ')' || n > size)
        return 0;
    snprintf(path, size, "%.*s", (int)(n - 1), toolchain + at);
    return 1;
}

/* The entry's source input, or NULL; *n_mem counts its in-memory headers. */
static const kcache_input *source_of(const kcache_entry *e, size_t *n_mem)
{
    const kcache_input *source = NULL;
    for (size_t i = 0; i < e->n_inputs; i++) {
        if (e->inputs[i].role == KCACHE_INPUT_SOURCE)
            source = &e->inputs[i];
        else if (e->inputs[i].role == KCACHE_INPUT_HEADER)
            (*n_mem)++;
    }
    return source;
}

/* Why the request, keyed here by made_by, has another key than the entry's. */
static const char *why_another_key(const kcache_compiler *made_by, const kc_recipe *rc)
{
    return strcmp(made_by->tk.nvrtc_id, rc->nvrtc) != 0
               ? "the NVRTC that made it is another build now"
           : strcmp(made_by->tk.identity, rc->toolkit) != 0
               ? "the toolkit's headers are another release now"
               : "its headers on disk are not the ones it was made from, seen from here: run "
                 "verify where the program ran";
}

/*
 * The extra digest's fields into f[0..*n_f): the tag, the directory of line
 * information, the options verbatim, then one name per in-memory header. A
 * failure on r where they do not parse or name another directory.
 */
static int split_extra(struct kc_result *r, const struct extra_field *x, size_t n_mem,
                       const char **f, size_t cap, size_t *n_f)
{
    size_t n = 0;
    for (size_t at = 0; at < x->size && n < cap;) {
        const char *s = (const char *)x->data + at;
        size_t len = strnlen(s, x->size - at);
        if (at + len == x->size)
            return kc_result_fail(r, KCACHE_ECORRUPT, "its key's extra digest does not parse");
        f[n++] = s;
        at += len + 1;
    }
    if (n < 2 + n_mem || n == cap)
        return kc_result_fail(r, KCACHE_ECORRUPT, "its key's extra digest does not parse");
    if (f[1][0]) {
        /* Line information and LTO-IR hold the directory it was made in: only there
         * is it the same. */
        char here[PATH_MAX];
        kc_nvrtc_workdir(here, sizeof(here));
        if (strcmp(here, f[1]) != 0)
            return kc_result_fail(r, KCACHE_ENOTSUP,
                                  "its bytes name the directory it was made in, %s: rebuild "
                                  "it from there", f[1]);
    }
    *n_f = n;
    return 0;
}

/* The entry's in-memory headers, as NUL-ended copies, under header_names[0..n_mem). */
static int copy_headers(const kcache_entry *e, const char *const *header_names, size_t n_mem,
                        const char ***names, char ***contents)
{
    *names = kc_calloc(n_mem + 1, sizeof(**names));
    *contents = kc_calloc(n_mem + 1, sizeof(**contents));
    int oom = !*names || !*contents;
    for (size_t i = 0, k = 0; !oom && i < e->n_inputs; i++)
        if (e->inputs[i].role == KCACHE_INPUT_HEADER) {
            (*names)[k] = header_names[k];
            oom = !((*contents)[k++] = kc_memdup(e->inputs[i].data, e->inputs[i].size));
        }
    return oom ? KCACHE_ENOMEM : 0;
}

/* The keyed request compiled again, uncached, by made_by: its bytes into r. */
static int compile_bytes(kcache_compiler *made_by, kcache_request *req, const kc_recipe *rc,
                         struct kc_result *r)
{
    kcache_result *res = NULL;
    req->flags = KCACHE_COMPILE_NO_CACHE;
    int status = kcache_compiler_compile(&res, made_by, req);
    if (status) {
        status = kc_result_fail(r, status, "%s", res ? res->message : kcache_strerror(status));
    } else if (!kc_nvrtc_loaded_is_keyed(&made_by->tk)) {
        status = kc_result_fail(r, KCACHE_ENOTSUP, "%s", KC_LOADED_IS_ANOTHER_BUILD);
    } else if (!(r->data = kc_memdup(res->data, res->size))) {
        status = KCACHE_ENOMEM;
    } else {
        r->pub.data = r->data;
        r->pub.size = res->size;
        r->pub.kind = res->kind;
        snprintf(r->arch, sizeof(r->arch), "%s", rc->arch);
    }
    kcache_result_free(res);
    return status;
}

int kc_rebuild_dropin(kcache_compiler *c, const kcache_entry *e, const kc_recipe *rc,
                      struct kc_result *r)
{
    struct extra_field x = {NULL, 0};
    kc_key_walk(e->key_material, e->key_material_size, find_extra, &x);
    size_t n_mem = 0;
    const kcache_input *source = source_of(e, &n_mem);
    if (!source)
        return kc_result_fail(r, KCACHE_ENOTSUP, "made by the drop-in before it kept what the "
                              "program compiled: rebuilt only on a miss");
    /* Keyed without its name (compile/progname.c): the name it was made with. */
    const char *name = rc->source_name[0] ? rc->source_name : source->name;
    char path[4096];
    if (!made_with(path, sizeof(path), e->toolchain))
        return kc_result_fail(r, KCACHE_ENOTSUP, "its toolchain does not name the drop-in's "
                              "NVRTC (%s)", e->toolchain ? e->toolchain : "");
    const char *f[4096];
    size_t n_f = 0;
    int status = split_extra(r, &x, n_mem, f, KC_ARRAY_SIZE(f), &n_f);
    if (status)
        return status;
    size_t n_opts = n_f - 2 - n_mem;
    /* NVRTC takes C strings: copies, each ended by a NUL. */
    const char **names = NULL;
    char **contents = NULL;
    char *text = kc_memdup(source->data, source->size);
    if (copy_headers(e, f + 2 + n_opts, n_mem, &names, &contents) || !text) {
        kc_strv_free(contents, n_mem);
        free(names);
        free(text);
        return KCACHE_ENOMEM;
    }

    kcache_compiler_options co = KCACHE_COMPILER_OPTIONS_INIT;
    co.no_store = 1;
    co.toolkit_root = c->tk.root;
    co.nvrtc_path = path;
    kcache_compiler *made_by = NULL;
    kcache_result *res = NULL;
    struct dropin_compile d;
    memset(&d, 0, sizeof(d));
    char err[512];
    if (kcache_compiler_new(&made_by, &co, err, sizeof(err)) != 0) {
        status = kc_result_fail(r, KCACHE_ENOTSUP, "the NVRTC that made it is not here (%s)",
                                err);
        goto out;
    }
    kcache_request req = KCACHE_REQUEST_INIT;
    req.source = text;
    req.source_name = name;
    req.source_path = name; /* as the drop-in asks: "quoted" includes beside it */
    if (kcache_kind_parse(&req.output, rc->output) != 0) {
        status = kc_result_fail(r, KCACHE_ECORRUPT, "its key names no output kind");
        goto out;
    }
    req.n_options = n_opts;
    req.options = f + 2;
    req.n_name_exprs = rc->n_exprs;
    req.name_exprs = (const char *const *)rc->exprs;
    req.extra_digest = x.data;
    req.extra_digest_size = x.size;
    req.n_headers = n_mem;
    req.header_names = names;
    req.header_contents = (const char *const *)contents;
    d = (struct dropin_compile){.tk = &made_by->tk, .source = text, .name = name,
                                .n_headers = n_mem, .header_names = names,
                                .header_contents = (const char *const *)contents,
                                .n_exprs = rc->n_exprs,
                                .exprs = (const char *const *)rc->exprs, .n_opts = n_opts,
                                .opts = f + 2, .kind = req.output};
    req.compile = compile_as_asked;
    req.compile_userdata = &d;
    /* First the key, from what is on disk now: the compile only where it is the entry's.
     * An entry keyed with its name was one whose result showed it (compile/progname.c):
     * its key is the one with the name. */
    req.flags = KCACHE_COMPILE_KEY_ONLY | (rc->source_name[0] ? 0 : KCACHE_COMPILE_NVRTC_NAMES) |
                (rc->n_header_paths ? KC_COMPILE_WITH_PATHS : 0);
    status = kcache_compiler_compile(&res, made_by, &req);
    if (status || !res->keyed) {
        status = kc_result_fail(r, KCACHE_ENOTSUP, "its request cannot be keyed here (%s)",
                                res && res->message[0] ? res->message
                                : res ? res->store_message : kcache_strerror(status));
        goto out;
    }
    if (memcmp(&res->key, &e->key, sizeof(e->key)) != 0) {
        status = kc_result_fail(r, KCACHE_ENOTSUP, "%s", why_another_key(made_by, rc));
        goto out;
    }
    kcache_result_free(res);
    res = NULL;
    status = compile_bytes(made_by, &req, rc, r);
out:
    kcache_result_free(res);
    dropin_compile_free(&d);
    kcache_compiler_free(made_by);
    free(names);
    kc_strv_free(contents, n_mem);
    free(text);
    return status;
}

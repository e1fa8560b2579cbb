/*
 * Request -> deps -> key -> store (hit) or compile -> store -> caller.
 * Nothing here knows about SQLite; nothing below knows about NVRTC.
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "compile/compileint.h"
#include "resolve/identity.h"
#include "compile/manifest.h"

/*
 * The directory NVRTC writes into the bytes, or "" when they hold none: line
 * information names it, and LTO-IR holds it whatever the options (NVRTC 13.0:
 * the same -dlto compile from /tmp and from /tmp/a differs in length by the
 * two characters).
 */
static void line_info_workdir(char *out, size_t size, const kc_opts *o)
{
    out[0] = '\0';
    int holds_dir = o->dlto;
    for (size_t i = 0; i < o->n_canonical; i++)
        holds_dir |= !strcmp(o->canonical[i], "--generate-line-info") ||
                     !strcmp(o->canonical[i], "--device-debug");
    if (holds_dir)
        kc_nvrtc_workdir(out, size);
}

/* A source larger than this is not CUDA C++ anyone compiles. */
#define KC_MAX_SOURCE_SIZE (256u << 20)

static int read_source(const char *path, char **out, size_t *size, struct kc_result *r)
{
    int rc = kc_read_file(path, KC_MAX_SOURCE_SIZE, out, size);
    if (rc == KCACHE_EIO)
        return kc_result_fail(r, rc, "cannot read %s: %s", path, strerror(errno));
    if (rc == KCACHE_EINVAL)
        return kc_result_fail(r, rc, "%s is not a regular file of at most %u MiB: not a CUDA "
                              "source", path, KC_MAX_SOURCE_SIZE >> 20);
    return rc;
}

void kc_work_free(struct work *w)
{
    free(w->source_buf);
    free(w->source_dir);
    kc_opts_free(&w->opts);
    if (!w->deps_borrowed)
        kc_deps_free(&w->deps);
    kc_strv_free(w->tk_dirs, w->n_tk_dirs);
    for (size_t i = 0; w->tk_spelled && i < w->n_tk_dirs; i++)
        free(w->tk_spelled[i]);
    free(w->tk_spelled);
    kc_nvenv_free(&w->env);
    kc_buf_free(&w->named_material);
    kc_buf_free(&w->based_material);
    kc_buf_free(&w->tmpl_material);
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static int prepare(kcache_compiler *c, const kcache_request *req, struct work *w,
                   struct kc_result *r)
{
    int rc;
    char msg[512];
    if ((rc = kc_version_check(msg, sizeof(msg), "kcache_request", req->version,
                               KCACHE_REQUEST_VERSION)))
        return kc_result_fail(r, rc, "%s", msg);
    if (req->source) {
        w->source = req->source;
        w->source_size = req->source_size ? req->source_size : strlen(req->source);
    } else if (req->source_path) {
        if ((rc = read_source(req->source_path, &w->source_buf, &w->source_size, r)))
            return rc;
        w->source = w->source_buf;
    } else {
        return kc_result_fail(r, KCACHE_EINVAL, "no source: give its text or its path");
    }
    if (memchr(w->source, '\0', w->source_size))
        return kc_result_fail(r, KCACHE_EINVAL, "%s holds NUL bytes: not CUDA C++ source text",
                              req->source_path ? req->source_path : "the source");
    w->source_name = req->source_name ? req->source_name
                     : req->source_path ? base_name(req->source_path)
                                        : "kernel.cu";
    if (req->source_path) {
        const char *slash = strrchr(req->source_path, '/');
        size_t dir_n = slash == req->source_path ? 1 : (size_t)(slash - req->source_path);
        w->source_dir = slash ? kc_memdup(req->source_path, dir_n) : kc_strdup(".");
        if (!w->source_dir)
            return KCACHE_ENOMEM;
    }
    if (req->n_options && !req->options)
        return kc_result_fail(r, KCACHE_EINVAL, "n_options without options");
    if (req->n_name_exprs && !req->name_exprs)
        return kc_result_fail(r, KCACHE_EINVAL, "n_name_exprs without name_exprs");
    for (size_t i = 0; i < req->n_name_exprs; i++)
        if (!req->name_exprs[i] || !*req->name_exprs[i])
            return kc_result_fail(r, KCACHE_EINVAL, "name expression %zu is empty", i);
    size_t n_mem = req->version >= 2 ? req->n_headers : 0;
    if (n_mem && (!req->header_names || !req->header_contents))
        return kc_result_fail(r, KCACHE_EINVAL, "n_headers without header_names and contents");
    for (size_t i = 0; i < n_mem; i++)
        if (!req->header_names[i] || !*req->header_names[i] || !req->header_contents[i])
            return kc_result_fail(r, KCACHE_EINVAL, "in-memory header %zu has no name or no "
                                  "content", i);
    if ((rc = kc_opts_parse(&w->opts, req->options, req->n_options, msg, sizeof(msg))))
        return kc_result_fail(r, rc, "%s", msg);
    if ((rc = kc_resolve_arch(c, req, w, r)))
        return rc;
    if (w->kind == KCACHE_KIND_LTOIR && !w->opts.dlto) {
        if ((rc = kc_strv_push(&w->opts.canonical, &w->opts.n_canonical, "--dlink-time-opt")))
            return rc;
        w->opts.dlto = 1;
    }
    line_info_workdir(w->workdir, sizeof(w->workdir), &w->opts);
    return 0;
}

/* Whether the last --std= asks for a standard older than C++14 (NVRTC's default is C++17). */
static int std_before_cxx14(const kc_opts *o)
{
    int before = 0;
    for (size_t i = 0; i < o->n_canonical; i++)
        if (!strncmp(o->canonical[i], "--std=", 6))
            before = !strcmp(o->canonical[i] + 6, "c++03") || !strcmp(o->canonical[i] + 6, "c++11");
    return before;
}

/*
 * The toolkit's -I directories, below its root, in the request's order: a
 * directory is the toolkit's by its real path (a path that only passes
 * through the toolkit is not). Once per request, before the closures are
 * tried: the closure's base key and the key hold them, and a hermetic
 * compile passes exactly these.
 */
static int toolkit_dirs(const kcache_compiler *c, struct work *w)
{
    size_t n = w->opts.n_include_dirs;
    char **real = kc_calloc(n + 1, sizeof(*real));
    int rc = real ? kc_closwatch_realpaths(real, w->opts.include_dirs, n) : KCACHE_ENOMEM;
    for (size_t i = 0; !rc && i < n; i++) {
        const char *rel = real[i] ? kc_path_below(c->tk.root, real[i]) : NULL;
        if (!rel)
            continue;
        /* As spelled too: NVRTC writes a toolkit header's path as the -I operand
         * gives it (/usr/local/cuda/include/..., not the link's target). */
        char **grown = kc_realloc(w->tk_spelled, (w->n_tk_dirs + 1) * sizeof(char *));
        if (grown)
            w->tk_spelled = grown;
        if (!grown || !(grown[w->n_tk_dirs] = kc_strdup(w->opts.include_dirs[i])))
            rc = KCACHE_ENOMEM;
        else if ((rc = kc_strv_push(&w->tk_dirs, &w->n_tk_dirs, *rel ? rel : ".")))
            free(grown[w->n_tk_dirs]);
    }
    kc_strv_free(real, n);
    return rc;
}

/*
 * Whether each toolkit directory the compile was given as spelled still is the
 * one its key names (a link re-pointed while NVRTC ran would have read another
 * toolkit's headers). 1, 0, or KCACHE_ENOMEM.
 */
static int toolkit_dirs_hold(const kcache_compiler *c, const struct work *w)
{
    for (size_t i = 0; i < w->n_tk_dirs; i++) {
        char *real = realpath(w->tk_spelled[i], NULL);
        if (!real && errno == ENOMEM)
            return KCACHE_ENOMEM;
        const char *rel = real ? kc_path_below(c->tk.root, real) : NULL;
        int same = rel && !strcmp(*rel ? rel : ".", w->tk_dirs[i]);
        free(real);
        if (!same)
            return 0;
    }
    return 1;
}

static void judge_resolution(const kcache_compiler *c, struct work *w);

/* Resolves what the compile reads (resolve/deps.c). */
static int resolve_deps(kcache_compiler *c, const kcache_request *req, struct work *w,
                        struct kc_result *r)
{
    char msg[512];
    int rc;
    size_t n_mem = req->version >= 2 ? req->n_headers : 0;
    /* Before the first read: a file changed since is judged against this. */
    w->resolved_at = kc_identity_now_ns();
    kc_deps_request dq = {
        .source = w->source,
        .source_size = w->source_size,
        .source_name = w->source_name,
        .source_dir = w->source_dir,
        .no_source_include = w->opts.no_source_include,
        .include_dirs = (const char *const *)w->opts.include_dirs,
        .n_include_dirs = w->opts.n_include_dirs,
        .defines = (const char *const *)w->opts.defines,
        .n_defines = w->opts.n_defines,
        .pre_includes = (const char *const *)w->opts.pre_includes,
        .n_pre_includes = w->opts.n_pre_includes,
        .toolkit_root = c->tk.root,
        .mem_names = n_mem ? req->header_names : NULL,
        .mem_contents = n_mem ? req->header_contents : NULL,
        .n_mem = n_mem,
        .read_at = w->resolved_at,
        .before_cxx14 = std_before_cxx14(&w->opts),
    };
    if ((rc = kc_deps_resolve(&w->deps, &dq, msg, sizeof(msg))))
        return kc_result_fail(r, rc, "%s", msg);
    judge_resolution(c, w);
    return 0;
}

/*
 * What the key cannot cover whatever the headers: the resolution is then not
 * hermetic (the first reason stays), and the compile runs uncached.
 */
static void judge_resolution(const kcache_compiler *c, struct work *w)
{
    /*
     * A library without a GNU build-id: its file name is all the key would hold
     * of it, and two builds of one name (a patched or rebuilt NVRTC) would share
     * each other's kernels. Hermetic or uncached: uncached.
     */
    if (kc_toolkit_id_unknown(c->tk.nvrtc_id)) {
        w->deps.not_hermetic = 1;
        snprintf(w->deps.reason, sizeof(w->deps.reason), "nvrtc_without_build_id");
        snprintf(w->deps.problem, sizeof(w->deps.problem),
                 "NVRTC %s has no GNU build-id to tell its build from another's",
                 c->tk.nvrtc_path);
    }
    /* Options kcache leaves NVRTC to read (compile/opts.c says which). */
    if (!w->deps.not_hermetic && (w->opts.uncached_reason || w->opts.several_archs)) {
        w->deps.not_hermetic = 1;
        snprintf(w->deps.reason, sizeof(w->deps.reason), "%s",
                 w->opts.uncached_reason ? w->opts.uncached_reason : "several_archs");
        snprintf(w->deps.problem, sizeof(w->deps.problem), "%s",
                 w->opts.uncached_reason ? w->opts.uncached_problem
                                         : "-arch is given twice with different values, which "
                                           "NVRTC combines");
    }
    /* A PCH file named by the caller is read (or written) beside the key. */
    for (size_t i = 0; i < w->opts.n_canonical && !w->deps.not_hermetic; i++) {
        if (!strncmp(w->opts.canonical[i], "--use-pch=", 10) ||
            !strncmp(w->opts.canonical[i], "--create-pch=", 13)) {
            w->deps.not_hermetic = 1;
            snprintf(w->deps.reason, sizeof(w->deps.reason), "explicit_pch");
            snprintf(w->deps.problem, sizeof(w->deps.problem),
                     "%s names a precompiled header file, which the key cannot cover",
                     w->opts.canonical[i]);
        }
    }
}

/* A field of resolution_inputs(): its length, then its bytes; NULL is not "". */
static int put_field(kc_buf *b, const char *data, size_t size)
{
    uint64_t n = data ? (uint64_t)size : UINT64_MAX;
    if (kc_buf_append(b, &n, sizeof(n)) || (data && size && kc_buf_append(b, data, size)))
        return KCACHE_ENOMEM;
    return 0;
}

static int put_strs(kc_buf *b, const char *const *v, size_t n)
{
    uint64_t count = n;
    int rc = kc_buf_append(b, &count, sizeof(count)) ? KCACHE_ENOMEM : 0;
    for (size_t i = 0; !rc && i < n; i++)
        rc = put_field(b, v[i], v[i] ? strlen(v[i]) : 0);
    return rc;
}

/*
 * The digest of everything the include resolution reads besides the disk
 * (resolve_deps() hands it all to kc_deps_resolve(), and the working
 * directory gives relative paths their meaning): two requests with the same
 * digest resolve alike, so a kept resolution may stand for a new one.
 */
static int resolution_inputs(uint8_t out[KC_DIGEST_SIZE], const kcache_compiler *c,
                             const kcache_request *req, const struct work *w)
{
    char cwd[PATH_MAX];
    size_t n_mem = req->version >= 2 ? req->n_headers : 0;
    kc_buf b = {0};
    const char *flags[2] = {w->opts.no_source_include ? "no-source-include" : "",
                            std_before_cxx14(&w->opts) ? "before-c++14" : ""};
    if (!getcwd(cwd, sizeof(cwd)))
        return KCACHE_EIO;
    int rc = put_field(&b, cwd, strlen(cwd));
    if (!rc)
        rc = put_field(&b, w->source, w->source_size);
    if (!rc)
        rc = put_strs(&b, (const char *const[]){w->source_name, w->source_dir, c->tk.root}, 3);
    if (!rc)
        rc = put_strs(&b, flags, 2);
    if (!rc)
        rc = put_strs(&b, (const char *const *)w->opts.include_dirs, w->opts.n_include_dirs);
    if (!rc)
        rc = put_strs(&b, (const char *const *)w->opts.defines, w->opts.n_defines);
    if (!rc)
        rc = put_strs(&b, (const char *const *)w->opts.pre_includes, w->opts.n_pre_includes);
    if (!rc && n_mem)
        rc = put_strs(&b, req->header_names, n_mem) || put_strs(&b, req->header_contents, n_mem)
                 ? KCACHE_ENOMEM
                 : 0;
    if (!rc)
        kc_digest(out, b.data, b.size);
    kc_buf_free(&b);
    return rc;
}

/*
 * Takes the resolution kept with req->resolution_of when this request reads
 * exactly what that one read: 1 (w->deps borrowed), 0 (resolve anew), or an
 * error. Its files were checked after the compile that kept it; a compile
 * this request runs checks them again (run_caller_step).
 */
static int borrow_resolution(const kcache_compiler *c, const kcache_request *req,
                             struct work *w)
{
    const struct kc_kept_resolution *k =
        req->version >= 4 && req->resolution_of
            ? ((const struct kc_result *)req->resolution_of)->kept
            : NULL;
    uint8_t inputs[KC_DIGEST_SIZE];
    if (!k || !req->compile)
        return 0; /* kcache's own compile hands over the headers' texts, which are not kept */
    int rc = resolution_inputs(inputs, c, req, w);
    if (rc)
        return rc == KCACHE_ENOMEM ? rc : 0;
    if (memcmp(inputs, k->inputs, sizeof(inputs)) != 0)
        return 0;
    w->deps = k->deps;
    w->deps_borrowed = 1;
    w->resolved_at = k->resolved_at;
    judge_resolution(c, w);
    return 1;
}

/*
 * Moves a keyed miss's resolution into r, when the request asks (a failure
 * only costs time), without the headers' texts: a request with a compiler
 * of its own (the drop-in's) derives its key from the rest.
 */
static void keep_resolution(const kcache_compiler *c, const kcache_request *req,
                            struct work *w, struct kc_result *r)
{
    if (req->version < 4 || !(req->flags & KCACHE_COMPILE_KEEP_RESOLUTION) ||
        w->deps_borrowed || r->pub.hit || r->kept)
        return;
    struct kc_kept_resolution *k = kc_calloc(1, sizeof(*k));
    if (!k || resolution_inputs(k->inputs, c, req, w) != 0) {
        free(k);
        return;
    }
    k->deps = w->deps;
    k->resolved_at = w->resolved_at;
    memset(&w->deps, 0, sizeof(w->deps));
    /* The key needs the headers' digests, not their texts (all of CuPy's, ~8 MB). */
    for (size_t i = 0; i < k->deps.n_deps; i++) {
        free(k->deps.deps[i].content);
        k->deps.deps[i].content = NULL;
    }
    r->kept = k;
}

/* What a compile's key and its closure's base key share: all but the headers. */
static kc_key_compile key_inputs(const kcache_compiler *c, const kcache_request *req,
                                 const struct work *w)
{
    kc_key_compile in = {
        .output_kind = kcache_kind_name(w->kind),
        .arch = w->nvrtc_arch,
        .nvrtc_id = c->tk.nvrtc_id,
        .toolkit_id = c->tk.identity,
        .options = (const char *const *)w->opts.canonical,
        .n_options = w->opts.n_canonical,
        .name_exprs = req->name_exprs,
        .n_name_exprs = req->n_name_exprs,
        .source_name = w->source_name,
        .source = w->source,
        .source_size = w->source_size,
        .extra = req->extra_digest,
        .extra_size = req->extra_digest_size,
        .workdir = w->workdir[0] ? w->workdir : NULL,
        .env = (const char *const *)w->env.set,
        .n_env = w->env.n_set,
    };
    return in;
}

/*
 * Whether the paths user headers are handed under go in the key (w->paths_keyed):
 * where a header's code may expand its own __FILE__, or the options write every
 * header's path (judge_paths()); elsewhere the check after the compile
 * decides (paths_as_shown()), for a caller's compiler too. A header reached by two
 * paths whose code may expand its own: NVRTC says the one it reaches first,
 * which no resolution can tell, so the compile is not hermetic.
 */
static int callers_compiler(const kcache_request *req);
static const char *name_dir(const struct work *w);

static void judge_header_paths(const kcache_request *req, struct work *w)
{
    const char *unsure = NULL;
    w->paths_keyed = 0;
    w->own_compile = !callers_compiler(req);
    if (w->deps.not_hermetic)
        return;
    w->paths_keyed = !kc_paths_free_request(w, &unsure) || w->paths_forced;
    /* A caller's compiler reads the disk: its result is NVRTC's whichever path it met. */
    if (unsure && w->own_compile) {
        w->deps.not_hermetic = 1;
        snprintf(w->deps.reason, sizeof(w->deps.reason), "header_reached_two_ways");
        snprintf(w->deps.problem, sizeof(w->deps.problem),
                 "%s is reached by two paths and its code may write its own, which NVRTC "
                 "takes from whichever include it meets first", unsure);
    }
}

/*
 * The key of a compile (compile/key.c holds the format), into r. Where the
 * request may be keyed without its name (progname.c), r's key leaves it out
 * and w keeps the key with it, for a result that turns out to show it.
 */
static int derive_key(kcache_compiler *c, const kcache_request *req, struct work *w,
                      struct kc_result *r)
{
    if (req->extra_digest_size && !req->extra_digest)
        return kc_result_fail(r, KCACHE_EINVAL, "extra_digest_size without extra_digest");
    kc_result_headers_reset(r);
    for (size_t i = 0; i < w->deps.n_deps; i++)
        if (w->deps.deps[i].state != KC_DEP_ABSENT &&
            kc_strv_push(&r->headers, &r->n_headers, w->deps.deps[i].name))
            return KCACHE_ENOMEM;
    r->pub.n_headers = r->n_headers;
    r->pub.headers = (const char *const *)r->headers;
    kc_key_compile in = key_inputs(c, req, w);
    /* The source as NVRTC gets it: its include spellings rewritten (deps.c). */
    if (w->deps.source) {
        in.source = w->deps.source;
        in.source_size = w->deps.source_size;
    }
    in.deps = w->deps.deps;
    in.n_deps = w->deps.n_deps;
    in.handed = (const char *const *)w->deps.handed;
    in.n_handed = w->deps.n_handed;
    in.tk_dirs = (const char *const *)w->tk_dirs;
    in.tk_spelled = (const char *const *)w->tk_spelled;
    in.include_dirs = (const char *const *)w->opts.include_dirs;
    in.n_include_dirs = w->opts.n_include_dirs;
    /* The program's directory only where a header's path starts with it: CuPy names
     * every program in a new directory, and its headers come through -I. */
    for (size_t i = 0; i < w->deps.n_deps && !in.source_dir; i++)
        if (w->deps.deps[i].state == KC_DEP_USER && w->deps.deps[i].nv_from_name)
            in.source_dir = name_dir(w);
    in.n_tk_dirs = w->n_tk_dirs;
    judge_header_paths(req, w);
    in.paths = w->paths_keyed;
    w->name_free = !w->deps.not_hermetic && kc_name_free_request(req, w);
    int rc = 0;
    if (w->name_free)
        rc = kc_key_encode_compile(&w->named_material, &w->named_key, &in);
    const char *slash = strrchr(w->source_name, '/');
    w->has_based = w->name_free && slash && slash[1];
    if (!rc && w->has_based) {
        in.base_name = slash + 1;
        rc = kc_key_encode_compile(&w->based_material, &w->based_key, &in);
        in.base_name = NULL;
    }
    if (!rc && w->name_free) {
        in.log_template = slash ? "/" : "";
        rc = kc_key_encode_compile(&w->tmpl_material, &w->tmpl_key, &in);
        in.log_template = NULL;
    }
    w->has_paths_key = !rc && !w->paths_keyed && !w->deps.not_hermetic;
    w->key_in = in;
    in.any_name = w->name_free;
    w->key_free = w->name_free;
    if (!rc)
        rc = kc_key_encode_compile(&r->material, &r->pub.key, &in);
    if (!rc)
        kc_result_keyed(r);
    return rc;
}

/* Puts *key and *material in r's place, and r's in theirs. */
static void swap_key(struct kc_result *r, kcache_key *key, kc_buf *material)
{
    kc_buf m = r->material;
    kcache_key k = r->pub.key;
    r->material = *material;
    r->pub.key = *key;
    *material = m;
    *key = k;
    kc_result_keyed(r);
}

/* Puts the key with the name in r's place (w then holds the one without). */
void kc_use_named_key(struct work *w, struct kc_result *r)
{
    swap_key(r, &w->named_key, &w->named_material);
    w->name_free = 0;
    w->key_free = 0;
}

/* Puts the key with the name's last component in r's place (w then holds the one without). */
static void use_based_key(struct work *w, struct kc_result *r)
{
    swap_key(r, &w->based_key, &w->based_material);
    w->name_free = 0;
    w->key_free = 0;
    w->has_based = 0;
    w->key_based = 1;
}

/* Puts the key of a log template in r's place (w then holds the one without). */
static void use_template_key(struct work *w, struct kc_result *r)
{
    swap_key(r, &w->tmpl_key, &w->tmpl_material);
    w->name_free = 0;
    w->key_free = 0;
    w->key_template = 1;
}

enum { KC_PATHS_ANY, KC_PATHS_TEMPLATE, KC_PATHS_BASE, KC_PATHS_NAMED };

/* The key of name variant v (what progname.c keeps of the name) with the headers'
 * paths. 0 or KCACHE_ENOMEM. */
static int encode_paths_key(const struct work *w, int v, kc_buf *material, kcache_key *key)
{
    kc_key_compile in = w->key_in;
    const char *slash = strrchr(w->source_name, '/');
    in.paths = 1;
    in.any_name = v == KC_PATHS_ANY;
    in.log_template = v == KC_PATHS_TEMPLATE ? (slash ? "/" : "") : NULL;
    in.base_name = v == KC_PATHS_BASE && slash ? slash + 1 : NULL;
    return kc_key_encode_compile(material, key, &in) ? KCACHE_ENOMEM : 0;
}

/* Puts that key (material and key, taken) in r's place, w's flags saying which it is. */
static void use_paths_key(struct work *w, struct kc_result *r, int v, kc_buf material,
                          const kcache_key *key)
{
    kc_buf_free(&r->material);
    r->material = material;
    r->pub.key = *key;
    kc_result_keyed(r);
    w->has_paths_key = 0;
    w->name_free = 0;
    w->key_free = v == KC_PATHS_ANY;
    w->key_template = v == KC_PATHS_TEMPLATE;
    w->key_based = v == KC_PATHS_BASE;
}

/* Into r's place: the key of r's own name variant (key_as_shown() chose it) with the
 * headers' paths. 0 or KCACHE_ENOMEM. */
static int with_paths_key(struct work *w, struct kc_result *r)
{
    int v = w->key_template ? KC_PATHS_TEMPLATE
            : w->key_based  ? KC_PATHS_BASE
            : w->key_free   ? KC_PATHS_ANY
                            : KC_PATHS_NAMED;
    kc_buf material = {0};
    kcache_key key;
    int rc = encode_paths_key(w, v, &material, &key);
    if (!rc)
        use_paths_key(w, r, v, material, &key);
    return rc;
}

/*
 * A fresh result that shows a user header's path (kc_paths_show()): filed
 * under its name variant's key with the paths, where the request was keyed
 * without them. In kcache's own compile, one that shows the path of a header
 * reached by two paths may not be NVRTC's (which path NVRTC says depends on
 * which include it meets first): not stored, and compiled again reading the
 * disk (w->paths_unsure). 1: filed under the paths' key; -1: not to be
 * stored; 0: as it was.
 */
static int paths_as_shown(struct work *w, struct kc_result *r)
{
    int amb = 0;
    for (size_t i = 0; w->own_compile && i < w->deps.n_deps && !amb; i++)
        amb = w->deps.deps[i].state == KC_DEP_USER && w->deps.deps[i].nv_ambiguous;
    int shows = amb || w->has_paths_key ? kc_paths_show(r, w) : KC_PATHS_NONE;
    if (amb && shows == KC_PATHS_AMBIGUOUS) {
        w->paths_unsure = 1;
        return -1;
    }
    if (!w->has_paths_key || shows == KC_PATHS_NONE)
        return 0;
    return with_paths_key(w, r) ? -1 : 1;
}

/*
 * Files a fresh result under the key for what it shows of the name
 * (kc_name_shows()). Returns the log to store in place of r's (a template),
 * for the caller to free, or NULL: r's own.
 */
static char *key_as_shown(struct work *w, struct kc_result *r)
{
    if (!w->name_free) /* paths_as_shown() may have filed it with its name */
        return NULL;
    char *tmpl = NULL;
    int shows = kc_name_shows(r, w->source_name, &tmpl);
    if (shows == KC_NAME_FULL || (shows == KC_NAME_BASE && !w->has_based))
        kc_use_named_key(w, r);
    else if (shows == KC_NAME_BASE)
        use_based_key(w, r);
    else if (shows == KC_NAME_TEMPLATE)
        use_template_key(w, r);
    return tmpl;
}

/*
 * A hit of a request keyed without its name: under that key, or else under
 * a log template's, the key with its last component, or with it whole (an
 * entry whose result showed that much of the name). 1 (r filled, a
 * template's log filled with the name) or 0 (compile, r's key the one
 * without the name).
 */
int kc_name_free_hit(kcache_compiler *c, struct work *w, unsigned flags, struct kc_result *r)
{
    unsigned get_flags = flags & KCACHE_COMPILE_UNCOUNTED ? KCACHE_GET_NO_COUNT : 0;
    kcache_entry *e = NULL;
    int as = KC_NAME_NONE;
    int rc = kcache_store_get(&e, c->store, &r->pub.key, get_flags);
    if (rc == KCACHE_ENOTFOUND) {
        as = KC_NAME_TEMPLATE;
        rc = kcache_store_get(&e, c->store, &w->tmpl_key, get_flags);
    }
    if (rc == KCACHE_ENOTFOUND && w->has_based) {
        as = KC_NAME_BASE;
        rc = kcache_store_get(&e, c->store, &w->based_key, get_flags);
    }
    if (rc == KCACHE_ENOTFOUND) {
        as = KC_NAME_FULL;
        rc = kcache_store_get(&e, c->store, &w->named_key, get_flags);
    }
    if (rc) /* not there, or a store error that the lookup under the lease reports */
        return 0;
    if (as == KC_NAME_FULL)
        kc_use_named_key(w, r);
    else if (as == KC_NAME_BASE)
        use_based_key(w, r);
    else if (as == KC_NAME_TEMPLATE)
        use_template_key(w, r);
    else
        w->name_free = 0;
    kc_result_from_entry(r, e);
    return 1;
}

/* A directory as a closure records it: relative ones depend on the working directory. */
static int add_dir(kc_buf *b, size_t *sizes, size_t *n, const char *what, const char *dir,
                   const char *cwd)
{
    size_t start = b->size;
    int failed = kc_buf_append(b, what, strlen(what) + 1);
    if (dir && dir[0] != '/' && !failed)
        failed = kc_buf_append(b, cwd, strlen(cwd)) || kc_buf_append(b, "/", 1);
    if (dir && !failed)
        failed = kc_buf_append(b, dir, strlen(dir));
    sizes[(*n)++] = b->size - start;
    return failed ? KCACHE_ENOMEM : 0;
}

/* The directory the main source's "quoted" includes are looked for in, or NULL. */
static const char *name_dir(const struct work *w)
{
    return w->opts.no_source_include ? NULL : w->source_dir;
}

/*
 * The key closures are kept under: everything the key has but the headers,
 * plus where headers are searched (a closure names paths, so it must not
 * answer for another search path). compile/key.c encodes it. any: with the
 * name's last component alone and its directory as a place, not a path
 * (w->base_any), for closures recorded relative to it. tmpl: as any, but
 * for the entries of log templates, with no name at all (w->base_tmpl): a
 * kcache that does not know templates never finds a closure that leads to one.
 */
static int derive_base_as(kcache_compiler *c, const kcache_request *req, struct work *w,
                          int any, int tmpl, kcache_key *out)
{
    char cwd[4096];
    if (req->extra_digest_size && !req->extra_digest)
        return KCACHE_EINVAL; /* derive_key says so */
    if (!getcwd(cwd, sizeof(cwd)))
        return KCACHE_EIO; /* no working directory: relative paths mean nothing stable */
    size_t n_mem = req->version >= 2 ? req->n_headers : 0;
    size_t n_search = 0,
           cap = 2 + 2 * w->opts.n_include_dirs + w->opts.n_pre_includes + n_mem;
    size_t *sizes = kc_calloc(cap, sizeof(*sizes));
    const char **search = kc_calloc(cap, sizeof(*search));
    kc_buf b = {0};
    int rc = sizes && search ? 0 : KCACHE_ENOMEM;
    if (!rc)
        rc = add_dir(&b, sizes, &n_search, "toolkit", c->tk.root, cwd);
    if (!rc && any && name_dir(w))
        rc = add_dir(&b, sizes, &n_search, "source-dir-any", NULL, cwd);
    else if (!rc)
        rc = add_dir(&b, sizes, &n_search,
                     name_dir(w) && name_dir(w)[0] != '/' ? "source-dir-rel" : "source-dir",
                     name_dir(w), cwd);
    /* Relative or not, as given: NVRTC writes header paths with the operand as it is. */
    for (size_t i = 0; !rc && i < w->opts.n_include_dirs; i++)
        rc = add_dir(&b, sizes, &n_search,
                     w->opts.include_dirs[i][0] == '/' ? "include-dir" : "include-dir-rel",
                     w->opts.include_dirs[i], cwd);
    /*
     * The toolkit's directories by real path (toolkit_dirs()): what toolkit
     * headers find among themselves depends on them, and no closure records
     * those lookups (the toolkit's build keys them), so a link re-pointed
     * between the toolkit and elsewhere must change this key too.
     */
    for (size_t i = 0; !rc && i < w->n_tk_dirs; i++)
        rc = add_dir(&b, sizes, &n_search, "toolkit-dir", w->tk_dirs[i], c->tk.root);
    for (size_t i = 0; !rc && i < w->opts.n_pre_includes; i++)
        rc = add_dir(&b, sizes, &n_search, "pre-include", w->opts.pre_includes[i], cwd);
    /* The caller's in-memory headers are inputs no closure records: by name and content here. */
    for (size_t i = 0; !rc && i < n_mem; i++) {
        uint8_t digest[KC_DIGEST_SIZE];
        const char *text = req->header_contents[i];
        kc_digest(digest, text, strlen(text));
        size_t start = b.size;
        const char *name = req->header_names[i];
        if (kc_buf_append(&b, "mem-header", 11) || kc_buf_append(&b, name, strlen(name) + 1) ||
            kc_buf_append(&b, digest, sizeof(digest)))
            rc = KCACHE_ENOMEM;
        sizes[n_search++] = b.size - start;
    }
    if (!rc) {
        size_t off = 0;
        for (size_t i = 0; i < n_search; i++) {
            search[i] = (const char *)b.data + off;
            off += sizes[i];
        }
        kc_key_compile in = key_inputs(c, req, w);
        /* A name without a directory stays a source name: its closures may lead to the key
         * with the name (record_manifest()), which a name with a directory must not reach. */
        const char *slash = strrchr(w->source_name, '/');
        if (tmpl)
            in.log_template = slash ? "/" : "";
        else if (any && slash)
            in.base_name = slash + 1;
        rc = kc_key_encode_base(out, &in, search, sizes, n_search);
    }
    kc_buf_free(&b);
    free(sizes);
    free(search);
    return rc;
}

static int derive_base(kcache_compiler *c, const kcache_request *req, struct work *w)
{
    int rc = derive_base_as(c, req, w, 0, 0, &w->base);
    return rc ? rc : derive_base_as(c, req, w, 1, 0, &w->base_any);
}

/*
 * The base key of log templates' closures, or NULL: made when first asked
 * for (a hit through the other two never needs it).
 */
static const kcache_key *template_base(kcache_compiler *c, const kcache_request *req,
                                       struct work *w)
{
    if (!w->base_tmpl_made)
        w->base_tmpl_made = derive_base_as(c, req, w, 1, 1, &w->base_tmpl) ? -1 : 1;
    return w->base_tmpl_made > 0 ? &w->base_tmpl : NULL;
}

/* Whether the request brings its own compiler (kcache_request.compile): it reads the disk. */
static int callers_compiler(const kcache_request *req)
{
    return req->version >= 2 && req->compile;
}

/* Stores a fresh artifact with its inputs, so that verify can recompile it. */
static void store_result(kcache_compiler *c, const struct work *w, struct kc_result *r)
{
    size_t n_in = 0;
    kcache_input *in = kc_calloc(w->deps.n_deps + 1, sizeof(*in));
    if (!in) {
        kc_result_store_problem(r, KCACHE_ENOMEM, "out of memory storing the artifact");
        kc_store_count_failure(c->store);
        return;
    }
    /* What NVRTC was given, so that a recompile gives it the same. */
    if (w->deps.source)
        in[n_in++] = (kcache_input){KCACHE_INPUT_SOURCE, w->source_name, w->deps.source,
                                    w->deps.source_size};
    else
        in[n_in++] = (kcache_input){KCACHE_INPUT_SOURCE, w->source_name, w->source,
                                    w->source_size};
    for (size_t i = 0; i < w->deps.n_deps; i++)
        if (w->deps.deps[i].state == KC_DEP_USER)
            in[n_in++] = (kcache_input){KCACHE_INPUT_HEADER, w->deps.deps[i].name,
                                        w->deps.deps[i].content, w->deps.deps[i].size};
    const kc_nvrtc *api = NULL;
    char toolchain[256], ignored[64];
    kc_nvrtc_get(&c->tk, &api, ignored, sizeof(ignored));
    snprintf(toolchain, sizeof(toolchain), "nvrtc %d.%d (%s)", api ? api->major : 0,
             api ? api->minor : 0, c->tk.nvrtc_id);
    kc_store_result(c, r, w->source_name, toolchain, in, n_in);
    free(in);
}

/*
 * Why a compile without -restrict is not what its options give in another
 * process: NVIDIA's NVRTC keeps -restrict once this process asked for it
 * (cuda/toolkit.h). Checked before the lookup and again before a store, for
 * a compile with -restrict that another thread started meanwhile. NULL if not.
 */
static const char *kept_restrict(const struct work *w)
{
    if (!kc_nvrtc_restrict_kept() ||
        kc_nvrtc_opts_restrict(w->opts.n_canonical, (const char *const *)w->opts.canonical))
        return NULL;
    return "NVRTC applies -restrict to every compile of a process after one that asked for "
           "it (NVIDIA's NVRTC keeps the option): compiled as NVRTC would here, uncached";
}

const char *kc_kept_restrict(const struct work *w)
{
    return kept_restrict(w);
}

/* A compile as a step of kc_through_cache(). */
struct compile_step {
    kcache_compiler *c;
    const kcache_request *req;
    struct work *w;
    int hermetic;
    char env_problem[256]; /* a variable NVRTC read that the key does not hold, or "" */
};

static int run_compile_step(void *ctx, struct kc_result *r)
{
    struct compile_step *s = ctx;
    unsigned long mark = kc_nvenv_mark();
    int rc = kc_run_nvrtc(s->c, s->req, s->w, r, s->hermetic);
    const char *why = kc_nvenv_unkeyed_since(&s->c->tk, mark, s->env_problem,
                                             sizeof(s->env_problem));
    if (why && why != s->env_problem)
        snprintf(s->env_problem, sizeof(s->env_problem), "%s", why);
    return rc;
}

static void store_compile_step(void *ctx, struct kc_result *r)
{
    struct compile_step *s = ctx;
    if (!kc_nvrtc_loaded_is_keyed(&s->c->tk)) {
        /* Its kernel is another build's than the key says: returned, not kept. */
        char msg[PATH_MAX + 160];
        snprintf(msg, sizeof(msg), "not stored: NVRTC at %s is another build than when kcache "
                 "opened (replaced since): its kernels would be filed under the other build",
                 s->c->tk.nvrtc_path);
        kc_result_store_problem(r, KCACHE_ENOTSUP, msg);
        return;
    }
    if (kept_restrict(s->w)) {
        kc_result_store_problem(r, KCACHE_ENOTSUP, "not stored: nvrtc_kept_restrict");
        kc_store_count_uncacheable(s->c->store, "nvrtc_kept_restrict");
        r->pub.keyed = 0;
        return;
    }
    if (s->env_problem[0]) {
        char msg[300];
        snprintf(msg, sizeof(msg), "not stored: %s", s->env_problem);
        kc_result_store_problem(r, KCACHE_ENOTSUP, msg);
        kc_store_count_uncacheable(s->c->store, "nvrtc_environment");
        r->pub.keyed = 0;
        return;
    }
    if (s->hermetic && s->w->n_tk_dirs && toolkit_dirs_hold(s->c, s->w) != 1) {
        kc_result_store_problem(r, KCACHE_ENOTSUP, "not stored: a toolkit -I directory "
                                "points elsewhere than when the compile began (re-linked?)");
        kc_store_count_uncacheable(s->c->store, "toolkit_dir_moved");
        r->pub.keyed = 0;
        return;
    }
    char *tmpl = key_as_shown(s->w, r);
    if (paths_as_shown(s->w, r) < 0) {
        free(tmpl);
        r->pub.keyed = 0;
        return; /* compiled again from the disk (compile_request) */
    }
    const char *log = r->pub.log;
    if (tmpl)
        r->pub.log = tmpl;
    store_result(s->c, s->w, r);
    r->pub.log = log;
    free(tmpl);
}

/* A miss compiled by the caller's own compiler (kcache_request.compile). */
/* A waiter served under the key with the name: that key in r's place (kc_step.also). */
static void served_named_compile(void *ctx, struct kc_result *r)
{
    kc_use_named_key(((struct compile_step *)ctx)->w, r);
}

static void served_named_caller(void *ctx, struct kc_result *r)
{
    kc_use_named_key(((struct caller_step *)ctx)->w, r);
}

/*
 * Whether every path of the closure still holds what was keyed, after a
 * compiler that reads the disk itself ran: a file edited during the compile
 * may have been read in either state. 1, 0, or KCACHE_ENOMEM.
 */
int kc_closure_holds(const struct work *w)
{
    kc_buf blob = {0}, refreshed = {0};
    int rc = kc_manifest_encode(&blob, w->deps.probes, w->deps.n_probes, NULL);
    if (!rc)
        rc = kc_manifest_check(blob.data, blob.size, w->resolved_at, NULL, &refreshed);
    kc_buf_free(&blob);
    kc_buf_free(&refreshed);
    return rc;
}

kcache_probe *kc_caller_probes(const struct work *w)
{
    kcache_probe *probes = kc_calloc(w->deps.n_probes + 1, sizeof(*probes));
    for (size_t i = 0; probes && i < w->deps.n_probes; i++) {
        int state = w->deps.probes[i].state;
        probes[i] = (kcache_probe){w->deps.probes[i].path,
                                   state == KC_PROBE_FILE || state == KC_PROBE_TOOLKIT};
    }
    return probes;
}

int kc_caller_take_made(struct caller_step *s, struct kc_result *r, const kcache_made *m, int rc)
{
    if (m->log && *m->log) {
        if (!(r->log = kc_strdup(m->log)))
            return KCACHE_ENOMEM;
        r->pub.log = r->log;
    }
    if (rc == KCACHE_ECOMPILE)
        return kc_result_compile_failed(r, s->w->source_name, s->c->tk.root);
    if (rc)
        return kc_result_fail(r, rc < 0 ? rc : KCACHE_EIO, "the caller's compiler failed (%d)",
                              rc);
    if (!m->data || !m->size || (m->n_names && (!m->name_exprs || !m->lowered_names)))
        return kc_result_fail(r, KCACHE_EINVAL, "the caller's compiler gave no artifact");
    if (!(r->data = kc_memdup(m->data, m->size)))
        return KCACHE_ENOMEM;
    r->pub.data = r->data;
    r->pub.size = m->size;
    if (!(s->toolchain = kc_strdup(m->toolchain ? m->toolchain : "the caller's compiler")))
        return KCACHE_ENOMEM;
    rc = kc_result_names_begin(r, m->n_names);
    for (size_t i = 0; !rc && i < m->n_names; i++)
        rc = kc_result_add_name(r, m->name_exprs[i] ? m->name_exprs[i] : "",
                                m->lowered_names[i] ? m->lowered_names[i] : "");
    return rc;
}

static int run_caller_step(void *ctx, struct kc_result *r)
{
    struct caller_step *s = ctx;
    kcache_made m;
    memset(&m, 0, sizeof(m));
    /* The closure, for a compiler that reads the disk to check what it read against. */
    kcache_probe *probes = NULL;
    if (s->req->version >= 3) {
        if (!(probes = kc_caller_probes(s->w)))
            return KCACHE_ENOMEM;
        m.n_probes = s->w->deps.n_probes;
        m.probes = probes;
        m.toolkit_root = s->c->tk.root;
    }
    /* NVRTC loaded by kcache (the drop-in's is the same library) has its getenv watched. */
    const kc_nvrtc *api = NULL;
    char ignored[64], env_problem[256];
    kc_nvrtc_get(&s->c->tk, &api, ignored, sizeof(ignored));
    unsigned long mark = kc_nvenv_mark();
    uint64_t t0 = kc_mono_ns();
    int rc = s->req->compile(s->req->compile_userdata, &m);
    r->pub.compile_ns = kc_mono_ns() - t0;
    free(probes);
    if (s->req->version >= 3 && m.no_store)
        s->no_store = m.no_store;
    else if (kc_nvenv_unkeyed_since(&s->c->tk, mark, env_problem, sizeof(env_problem)))
        s->no_store = "environment-not-keyed";
    else if (!rc && !s->no_store && kc_closure_holds(s->w) != 1)
        s->no_store = "closure-changed";
    else if (!s->no_store && kept_restrict(s->w))
        s->no_store = "restrict-kept"; /* the drop-in's name (nvrtc-shim/shim.c) */
    return kc_caller_take_made(s, r, &m, rc);
}

void kc_caller_store(void *ctx, struct kc_result *r)
{
    struct caller_step *s = ctx;
    if (s->no_store) {
        char msg[128];
        snprintf(msg, sizeof(msg), "not stored: %s", s->no_store);
        kc_result_store_problem(r, KCACHE_ENOTSUP, msg);
        kc_store_count_uncacheable(s->c->store, s->no_store);
        r->pub.keyed = 0;
        return;
    }
    /* What the caller's compiler was given, when it asks: kcache's own NVRTC
     * would not rebuild what another compiler made (recompile_dropin.c can,
     * for the drop-in's). Headers read from disk are not kept: a rebuild
     * reads them again, and only where they still are what the key says. */
    const kcache_request *req = s->req;
    size_t n_in = 0, n_mem = req->version >= 2 ? req->n_headers : 0;
    kcache_input *in = NULL;
    if ((req->flags & KCACHE_COMPILE_KEEP_INPUTS) && (in = kc_calloc(n_mem + 1, sizeof(*in)))) {
        in[n_in++] = (kcache_input){KCACHE_INPUT_SOURCE, s->w->source_name, s->w->source,
                                    s->w->source_size};
        for (size_t i = 0; i < n_mem; i++)
            in[n_in++] = (kcache_input){KCACHE_INPUT_HEADER, req->header_names[i],
                                        req->header_contents[i], strlen(req->header_contents[i])};
    }
    char *tmpl = key_as_shown(s->w, r);
    if (paths_as_shown(s->w, r) < 0) {
        /* The caller's compiler read the disk: its result is NVRTC's, but which
         * path the key should hold is not known. */
        kc_result_store_problem(r, KCACHE_ENOTSUP, "not stored: header_reached_two_ways");
        kc_store_count_uncacheable(s->c->store, "header_reached_two_ways");
        r->pub.keyed = 0;
        free(tmpl);
        free(in);
        return;
    }
    const char *log = r->pub.log;
    if (tmpl)
        r->pub.log = tmpl;
    kc_store_result(s->c, r, s->w->source_name, s->toolchain, in, n_in);
    r->pub.log = log;
    free(tmpl);
    free(in);
}

/*
 * The headers of a hit served through a closure, from its key material:
 * found in one walk (where each name is), then named in one allocation, the
 * names after the array (CuPy's hits name ~1,000 headers each).
 */
struct name_span {
    const uint8_t *at;
    size_t n;
};

struct headers_of {
    kc_buf spans; /* struct name_span, one a header */
    size_t bytes;
    int failed;
};

static int header_of(void *ud, int tag, const uint8_t *data, size_t n)
{
    struct headers_of *h = ud;
    size_t name_n = strnlen((const char *)data, n);
    if (tag != KC_TAG_HEADER || name_n + 5 > n || memcmp(data + name_n + 1, "file", 5) != 0)
        return 0;
    struct name_span span = {data, name_n};
    h->failed |= kc_buf_append(&h->spans, &span, sizeof(span));
    h->bytes += name_n + 1;
    return 0;
}

static int headers_of(struct kc_result *r, const kcache_entry *e)
{
    struct headers_of h = {{0}, 0, 0};
    /* Room for a CuPy kernel's headers at once: growing the spans cost a third of the walk. */
    h.failed = kc_buf_reserve(&h.spans, 1024 * sizeof(struct name_span));
    if (!h.failed)
        kc_key_walk(e->key_material, e->key_material_size, header_of, &h);
    const struct name_span *spans = (const struct name_span *)h.spans.data;
    size_t n = h.spans.size / sizeof(*spans), array = (n + 1) * sizeof(char *);
    char **names = h.failed ? NULL : kc_malloc(array + h.bytes);
    if (!names) {
        kc_buf_free(&h.spans);
        return KCACHE_ENOMEM;
    }
    char *at = (char *)names + array;
    for (size_t i = 0; i < n; i++) {
        names[i] = memcpy(at, spans[i].at, spans[i].n);
        at[spans[i].n] = '\0';
        at += spans[i].n + 1;
    }
    names[n] = NULL;
    kc_buf_free(&h.spans);
    kc_result_headers_reset(r);
    r->headers = names;
    r->n_headers = n;
    r->headers_block = 1;
    return 0;
}

/*
 * A hit without resolving the includes: a closure remembered under base
 * still holds (for a name in name_dir), and its key is in the store. Returns
 * 1 (r filled), 0 (nothing holds, or the entry is gone), or KCACHE_ENOMEM.
 */
static int manifest_hit_under(kcache_compiler *c, const kcache_key *base, const char *dir,
                              unsigned flags, struct kc_result *r, int *seen, int *held)
{
    kc_manifest_row *rows = NULL;
    size_t n = 0;
    if (kc_store_manifest_get(&rows, &n, c->store, base) != 0)
        return 0;
    *seen += n > 0;
    int64_t now = kc_identity_now_ns();
    int found = 0, rc = 0;
    for (size_t i = 0; !found && !rc && i < n; i++) {
        kc_buf refreshed = {0};
        int holds = kc_manifest_check_watched(rows[i].closure, rows[i].size,
                                              rows[i].recorded_at, dir, &refreshed);
        kcache_entry *e = NULL;
        *held += holds == 1;
        if (holds < 0) {
            rc = holds;
        } else if (holds == 1 && (flags & KCACHE_COMPILE_KEY_ONLY)) {
            /* The key a hit would look up; whether its entry is still there is not asked. */
            r->pub.key = rows[i].key;
            found = 1;
        } else if (holds == 1 &&
                   kcache_store_get(&e, c->store, &rows[i].key,
                                    flags & KCACHE_COMPILE_UNCOUNTED ? KCACHE_GET_NO_COUNT : 0) ==
                       0) {
            kc_result_from_entry(r, e);
            r->pub.key = rows[i].key;
            r->pub.key_material = e->key_material;
            r->pub.key_material_size = e->key_material_size;
            found = 1;
            rc = headers_of(r, e);
            r->pub.n_headers = r->n_headers;
            r->pub.headers = (const char *const *)r->headers;
            if (!(flags & KCACHE_COMPILE_UNCOUNTED))
                kc_store_count(c->store, "closure_hits", 1);
        }
        /* Files had to be hashed: written back, so the next check is stat() only. */
        if (found && !rc && refreshed.size)
            kc_store_manifest_put(c->store, base, &rows[i].key, now, refreshed.data,
                                  refreshed.size);
        kc_buf_free(&refreshed);
    }
    kc_manifest_rows_free(rows, n);
    return rc ? rc : found;
}

/* A closure for any name's directory first (the one CuPy's programs hit), then for this name. */
static int manifest_hit(kcache_compiler *c, const kcache_request *req, struct work *w,
                        unsigned flags, struct kc_result *r)
{
    int seen = 0, held = 0;
    const kcache_key *tmpl;
    int hit = manifest_hit_under(c, &w->base_any, name_dir(w), flags, r, &seen, &held);
    /* One key for both where the name has no directory and no place (derive_base_as()). */
    if (!hit && memcmp(w->base.bytes, w->base_any.bytes, KCACHE_KEY_SIZE) != 0)
        hit = manifest_hit_under(c, &w->base, NULL, flags, r, &seen, &held);
    /* A log template's, last: its log is filled with this name (kc_name_fill()). */
    if (!hit && (tmpl = template_base(c, req, w)))
        hit = manifest_hit_under(c, tmpl, name_dir(w), flags, r, &seen, &held);
    /* Why it missed, for the request log (KCACHE_LOG): said only if it does miss. */
    r->miss_why = held ? "its entry left the cache (pruned or evicted)"
                  : seen ? "a header changed since it was remembered (edited, added or removed "
                           "on the search path)"
                         : "nothing remembered for this source and options";
    return hit;
}

/* 1 if r's key may hold the paths user headers were handed under (paths_as_shown()
 * leaves has_paths_key 0 once it put that key in r's place). */
static int keyed_paths(const struct work *w)
{
    return w->paths_keyed || !w->has_paths_key;
}

/*
 * Remembers the closure of a resolution that led to r's key. Keyed without
 * the name, for any directory of it, where neither can change what the key
 * finds (kc_manifest_any_dir()); else under the name. A key that holds the
 * whole name holds no directory when the name has none (kcache compile names
 * a program by its file's name): its closure too stands for any directory,
 * so a checkout at another path hits by it. A failure only costs time later.
 */
static void record_manifest(kcache_compiler *c, const kcache_request *req, struct work *w,
                            const struct kc_result *r)
{
    kc_buf blob = {0};
    int dirless = w->key_free || w->key_based || w->key_template || !strchr(w->source_name, '/');
    /* A key that holds a header's path through the program's directory stands for that
     * directory alone. */
    for (size_t i = 0; dirless && i < w->deps.n_deps; i++)
        dirless = !(keyed_paths(w) && w->deps.deps[i].nv_from_name);
    int any = dirless && kc_manifest_any_dir(w->deps.probes, w->deps.n_probes, w->deps.beside_mixed,
                                             req->source_path);
    /* A log template's closure stands for any name, or is not kept: under the key with the
     * name, a kcache that does not know templates would find it. */
    if (w->key_template && !any)
        return;
    const kcache_key *base = w->key_template ? template_base(c, req, w)
                             : any             ? &w->base_any
                                               : &w->base;
    if (base && kc_manifest_encode(&blob, w->deps.probes, w->deps.n_probes, any ? name_dir(w) : NULL) == 0)
        kc_store_manifest_put(c->store, base, &r->pub.key, w->resolved_at, blob.data, blob.size);
    kc_buf_free(&blob);
}

/*
 * Whether the bytes hold the path NVRTC opened each header by: -G's debug
 * information names every file that gave code, and so does LTO-IR, where
 * kcache's own compile hands user headers over in memory under names of its
 * own (deps.c). Measured with NVRTC 13.0: a template of a header found
 * through -I gave ".file 2 \"<the source's directory>/a.h\"" under -G where
 * NVRTC reading the disk says "<the -I directory>/a.h", and LTO-IR 28 bytes
 * shorter. -lineinfo names the file of every function left a call: a
 * header's __noinline__ function gave ".file 1 \"<the source's
 * directory>/sub/a.h\"" where NVRTC says "<the -I directory>/sub/a.h"
 * (tests/compile/test_debugpaths.c).
 */
static int bytes_name_paths(const struct work *w)
{
    if (w->opts.dlto)
        return 1;
    for (size_t i = 0; i < w->opts.n_canonical; i++)
        if (!strcmp(w->opts.canonical[i], "--device-debug") ||
            !strcmp(w->opts.canonical[i], "--generate-line-info"))
            return 1;
    return 0;
}

/*
 * A compile of kcache's own whose bytes hold headers' paths: the hermetic
 * compile hands each user header under the path NVRTC would open it by
 * (#line; the same bytes as NVRTC's, measured for -G, -lineinfo and -dlto
 * with NVRTC 13.0), so the paths are keyed (w->paths_forced) and the working
 * directory those tables are joined to is too (line_info_workdir()). A
 * header reached by two paths (kc_dep.nv_ambiguous) would be named by
 * whichever NVRTC meets first: that compile reads the disk as NVRTC does,
 * uncached. A caller's own compiler reads the disk itself.
 */
static void judge_paths(const kcache_request *req, struct work *w)
{
    if (w->deps.not_hermetic || callers_compiler(req) || !bytes_name_paths(w))
        return;
    w->paths_forced = 1;
    for (size_t i = 0; i < w->deps.n_deps; i++) {
        if (w->deps.deps[i].state != KC_DEP_USER || !w->deps.deps[i].nv_ambiguous)
            continue;
        w->deps.not_hermetic = 1;
        snprintf(w->deps.reason, sizeof(w->deps.reason), "header_paths_in_bytes");
        snprintf(w->deps.problem, sizeof(w->deps.problem),
                 "-G, -lineinfo and -dlto write the path NVRTC opens each header by into the "
                 "kernel, and %s is reached by two paths", w->deps.deps[i].name);
        return;
    }
}

int kc_resolve_and_key(kcache_compiler *c, const kcache_request *req, struct work *w,
                       struct kc_result *r)
{
    int borrowed = borrow_resolution(c, req, w);
    int rc = borrowed < 0 ? borrowed : borrowed ? 0 : resolve_deps(c, req, w, r);
    if (!rc)
        judge_paths(req, w);
    if (!rc)
        rc = derive_key(c, req, w, r);
    if (!rc && w->env.reason[0] && !w->deps.not_hermetic) {
        w->deps.not_hermetic = 1;
        snprintf(w->deps.reason, sizeof(w->deps.reason), "%s", w->env.reason);
        snprintf(w->deps.problem, sizeof(w->deps.problem), "%s", w->env.problem);
    }
    return rc;
}

/* Drops what a run left in r, for another run. */
static void clear_output(struct kc_result *r)
{
    free(r->data);
    free(r->log);
    kc_strv_free(r->exprs, r->n_names);
    kc_strv_free(r->lowered, r->n_names);
    r->data = r->log = NULL;
    r->exprs = r->lowered = NULL;
    r->n_names = 0;
    r->pub.data = NULL;
    r->pub.size = 0;
    r->pub.log = "";
    r->pub.n_names = 0;
    r->pub.name_exprs = r->pub.lowered_names = NULL;
    r->message[0] = '\0';
}

/* The first line of a log that says "error", for a one-line reason. */
static void first_error(char *out, size_t size, const char *log)
{
    const char *p = log ? strstr(log, "error") : NULL;
    if (!p) {
        snprintf(out, size, "see the log");
        return;
    }
    const char *start = p;
    while (start > log && start[-1] != '\n')
        start--;
    snprintf(out, size, "%.*s", (int)KC_MIN(strcspn(start, "\n"), size - 1), start);
}

/*
 * A miss whose caller's compile runs while the includes are resolved
 * (overlap.c), then what the sequential path does after it: 0 or an error,
 * or KC_OVERLAP_DECLINED (nothing ran).
 */
static int overlapped(kcache_compiler *c, const kcache_request *req, struct work *w,
                      struct kc_result *r, int have_base)
{
    struct caller_step caller = {c, req, w, NULL, NULL};
    int rc = kc_overlap_miss(&caller, r);
    if (rc == KC_OVERLAP_DECLINED)
        return rc;
    if (!rc && w->deps.not_hermetic)
        kc_store_count_uncacheable(c->store, w->deps.reason);
    if (!rc && r->pub.keyed && have_base && !caller.no_store)
        record_manifest(c, req, w, r);
    if (!rc && r->pub.keyed && !caller.no_store)
        keep_resolution(c, req, w, r);
    free(caller.toolchain);
    return rc;
}

/*
 * kcache's own compile again, as NVRTC would (reading the disk through the
 * caller's -I), uncached, counted under reason and saying msg: where the
 * hermetic compile failed (kcache never fails a compile NVRTC alone would
 * pass; a genuine error fails both, and the caller gets NVRTC's own log), or
 * where its result shows the path of a header reached by two paths
 * (paths_as_shown(): NVRTC says the one it meets first).
 */
static int compile_from_disk(kcache_compiler *c, const kcache_request *req, struct work *w,
                             struct kc_result *r, const char *reason, const char *msg)
{
    clear_output(r);
    int rc = kc_run_nvrtc(c, req, w, r, 0);
    if (!rc) {
        r->pub.keyed = 0;
        kc_result_store_problem(r, KCACHE_ENOTSUP, msg);
        snprintf(w->deps.reason, sizeof(w->deps.reason), "%s", reason);
        w->deps.not_hermetic = 1;
    }
    return rc;
}

/*
 * A hit under a key with the headers' paths (paths_as_shown()), of each name
 * variant the request may have: 1 (r filled), 0 (r's key as it was), or
 * KCACHE_ENOMEM.
 */
static int paths_key_hit(kcache_compiler *c, struct work *w, unsigned flags, struct kc_result *r)
{
    unsigned get_flags = flags & KCACHE_COMPILE_UNCOUNTED ? KCACHE_GET_NO_COUNT : 0;
    const char *slash = strrchr(w->source_name, '/');
    for (int v = w->name_free ? KC_PATHS_ANY : KC_PATHS_NAMED; v <= KC_PATHS_NAMED; v++) {
        if (v == KC_PATHS_BASE && !(slash && slash[1]))
            continue;
        kc_buf material = {0};
        kcache_key key;
        kcache_entry *e = NULL;
        if (encode_paths_key(w, v, &material, &key))
            return KCACHE_ENOMEM;
        if (kcache_store_get(&e, c->store, &key, get_flags) == 0) {
            use_paths_key(w, r, v, material, &key);
            kc_result_from_entry(r, e);
            return 1;
        }
        kc_buf_free(&material);
    }
    return 0;
}

/* Whether no remembered closure may answer: options NVRTC is left to read are not all in
 * the base key. */
static int no_closure_tried(const struct work *w)
{
    return w->opts.uncached_reason || w->opts.several_archs;
}

/* What r says of the store where it will not be used: the resolution's reason, or the
 * store's. */
static void say_why_uncached(const kcache_compiler *c, const struct work *w, struct kc_result *r,
                             int hermetic)
{
    if (!hermetic) {
        char msg[700];
        snprintf(msg, sizeof(msg), "%s; compiled without the cache", w->deps.problem);
        kc_result_store_problem(r, KCACHE_ENOTSUP, msg);
    } else if (!c->store) {
        kc_result_store_problem(r, c->store_status, c->store_message);
    }
}

/* A hit that needed the resolution (another name's directory, a closure not kept):
 * its closure kept now, where there is a base key to keep it under. */
static void record_manifest_if(kcache_compiler *c, const kcache_request *req, struct work *w,
                               const struct kc_result *r, int have_base)
{
    if (have_base)
        record_manifest(c, req, w, r);
}

/*
 * The miss through the cache (lease, compile, store), then kcache's own
 * compile again reading the disk where the hermetic one cannot stand:
 * failed where NVRTC alone may pass, or showing a header's path NVRTC may
 * spell otherwise (*hermetic then 0).
 */
static int through_cache(kcache_compiler *c, const kcache_request *req, struct work *w,
                         struct kc_result *r, int use_store, struct kc_step *step, int *hermetic)
{
    int rc = kc_through_cache(c, r, use_store, req->flags, step);
    if (rc == KCACHE_ECOMPILE && *hermetic && step->run == run_compile_step) {
        char why[300], msg[512];
        first_error(why, sizeof(why), r->pub.log);
        snprintf(msg, sizeof(msg), "the hermetic compile failed where NVRTC reading the disk "
                 "passed (%s); compiled without the cache", why);
        rc = compile_from_disk(c, req, w, r, "hermetic_failed", msg);
        *hermetic = 0;
    } else if (!rc && w->paths_unsure && step->run == run_compile_step) {
        rc = compile_from_disk(c, req, w, r, "header_reached_two_ways",
                               "a header reached by two paths shows its path in the result; "
                               "compiled reading the disk, without the cache");
        *hermetic = 0;
    }
    return rc;
}

static int compile_request(kcache_compiler *c, const void *request, struct kc_result *r)
{
    const kcache_request *req = request;
    struct work w;
    memset(&w, 0, sizeof(w));
    int rc = prepare(c, req, &w, r);
    /* What fails here never reached NVRTC (a source that cannot be read, an
     * architecture that is not one): a bad request, counted apart from
     * failed compiles. */
    int bad_request = rc != 0;
    if (rc || (rc = toolkit_dirs(c, &w)))
        goto unkeyed;
    const char *kept = kept_restrict(&w);
    if (kept && !w.opts.uncached_reason) {
        w.opts.uncached_reason = "nvrtc_kept_restrict";
        w.opts.uncached_problem = kept;
    }
    /* NVRTC's environment variables: keyed, or the compile runs uncached. */
    if (!(req->flags & KCACHE_COMPILE_NO_CACHE) && !kc_toolkit_id_unknown(c->tk.nvrtc_id) &&
        (rc = kc_nvenv_get(&w.env, &c->tk, c->store)))
        goto unkeyed;
    unsigned key_only = req->flags & KCACHE_COMPILE_KEY_ONLY;
    int try_manifest = c->store && !kc_toolkit_id_unknown(c->tk.nvrtc_id) &&
                       !no_closure_tried(&w) && !w.env.reason[0] &&
                       !(req->flags & (KCACHE_COMPILE_NO_CACHE | KCACHE_COMPILE_REFRESH)) &&
                       (!key_only || (req->flags & KCACHE_COMPILE_KEY_REMEMBERED));
    int have_base = c->store && derive_base(c, req, &w) == 0;
    if (try_manifest && have_base) {
        int hit = manifest_hit(c, req, &w, req->flags, r);
        if (hit < 0) {
            rc = hit;
            goto out;
        }
        if (hit) {
            r->pub.keyed = 1;
            goto out;
        }
    }
    if (kc_overlap_wanted(c, req, &w) &&
        (rc = overlapped(c, req, &w, r, have_base)) != KC_OVERLAP_DECLINED)
        goto out;
    rc = kc_resolve_and_key(c, req, &w, r);
    int hermetic = !w.deps.not_hermetic;
    r->pub.keyed = !rc && hermetic;
    if (rc)
        goto unkeyed;
    say_why_uncached(c, &w, r, hermetic);
    if (req->flags & KCACHE_COMPILE_KEY_ONLY) {
        if ((req->flags & KC_COMPILE_WITH_PATHS) && w.has_paths_key)
            rc = with_paths_key(&w, r);
        goto out;
    }
    int use_store = c->store && hermetic && !(req->flags & KCACHE_COMPILE_NO_CACHE);
    struct compile_step ctx = {c, req, &w, hermetic, ""};
    struct kc_step step = {run_compile_step, store_compile_step, &ctx, w.nvrtc_arch, w.kind,
                           NULL, NULL};
    struct caller_step caller = {c, req, &w, NULL, NULL};
    if (callers_compiler(req))
        step = (struct kc_step){run_caller_step, kc_caller_store, &caller, w.nvrtc_arch, w.kind,
                                NULL, NULL};
    if (w.name_free) {
        /* A holder whose result showed the name filed it under the key with the name. */
        step.also = &w.named_key;
        step.served_also = step.run == run_compile_step ? served_named_compile
                                                        : served_named_caller;
    }
    if (use_store && w.name_free && !(req->flags & KCACHE_COMPILE_REFRESH) &&
        kc_name_free_hit(c, &w, req->flags, r)) {
        record_manifest_if(c, req, &w, r, have_base);
        goto out;
    }
    if (use_store && w.has_paths_key && !(req->flags & KCACHE_COMPILE_REFRESH) &&
        paths_key_hit(c, &w, req->flags, r) == 1) {
        record_manifest_if(c, req, &w, r, have_base);
        goto out;
    }
    rc = through_cache(c, req, &w, r, use_store, &step, &hermetic);
    if (w.deps.not_hermetic && !rc && c->store && !(req->flags & KCACHE_COMPILE_NO_CACHE))
        kc_store_count_uncacheable(c->store, w.deps.reason);
    if (!rc && hermetic && use_store && have_base && !caller.no_store)
        record_manifest(c, req, &w, r);
    if (!rc && r->pub.keyed && !caller.no_store)
        keep_resolution(c, req, &w, r);
    free(caller.toolchain);
    goto out;
unkeyed:
    /* A source that cannot be read or options that cannot be keyed: a failed
     * compile as far as stats is concerned, but not a probe's. */
    if (c->store && !(req->flags & (KCACHE_COMPILE_KEY_ONLY | KCACHE_COMPILE_NO_CACHE)))
        kc_store_count(c->store, bad_request ? "request_errors" : "errors", 1);
out:
    /* A log template's entry, however it was found: its log under this name. */
    if (!rc && r->pub.hit)
        rc = kc_name_fill(r, w.source_name);
    kc_work_free(&w);
    return rc;
}

KCACHE_API int kcache_compiler_compile(kcache_result **out, kcache_compiler *compiler,
                                       const kcache_request *request)
{
    const char *name = !request ? NULL
                       : request->source_name ? request->source_name
                       : request->source_path ? request->source_path : "kernel.cu";
    return kc_result_run(out, compiler, request, name, compile_request);
}

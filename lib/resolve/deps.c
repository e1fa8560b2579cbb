/*
 * The include resolver (see deps.h for NVRTC's search order).
 *
 * One file is one header to NVRTC. NVRTC looks headers handed in memory up by
 * the exact spelling of an #include, and applies #pragma once to the name it
 * was handed a header under (after folding "a/../b"; checked with NVRTC 13).
 * So a file reached as "config.h" and as "../config.h" would be two headers,
 * and #pragma once would not stop the second copy; and "trig.h" of two
 * directories could not both be handed over. kcache therefore gives every
 * file it reads one canonical name and rewrites, in the text it hands to
 * NVRTC, every literal include of that file to the canonical name, in place
 * on its line (line numbers do not move). The canonical name is the path the
 * file has below the include root it was found from: a file found through -I
 * is named by its spelling ("xsf/config.h"), a file found beside its includer
 * by the includer's name's directory joined with the spelling
 * ("xsf/cephes/../config.h" -> "xsf/config.h"), folded. It never depends on
 * where the checkout lives, so keys do not either; it is also what __FILE__
 * says inside a header (plain NVRTC says the path it opened). Two files that
 * would get one name, or a name a toolkit header or a missing header is
 * looked up by, get a prefix "@N/" instead.
 *
 * Computed includes (#include MACRO) cannot be rewritten: the name each can
 * expand to is handed over as an alias whose content includes the canonical
 * name. Every definition of the macro seen anywhere (any branch) is followed,
 * and identifiers inside a <...> operand are expanded the same way, as the
 * preprocessor does for a computed include: a superset of what the compile
 * reads is resolved, so the key is never short of an input.
 *
 * Every path looked at is recorded (kc_probe) with what was found there, for
 * the manifest: absent paths earlier on the search path matter as much as the
 * files found. Each path is looked at once per resolution, a file reached by
 * several paths is read once (matched by device and inode), and a toolkit
 * header is told apart by its real path (lookup.c).
 *
 * The resolver is five files over one state (resolveint.h says which does
 * what); this one scans each file and is the entry point.
 */
#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "resolve/resolveint.h"

static int add_macro(struct resolver *r, const char *name, const char *value)
{
    size_t v;
    if (!kc_smap_find(&r->by_macro, name, &v)) {
        if (kc_res_grow((void **)&r->macros, &r->cap_macros, r->n_macros, sizeof(*r->macros)))
            return KCACHE_ENOMEM;
        memset(&r->macros[r->n_macros], 0, sizeof(*r->macros));
        if (kc_smap_put(&r->by_macro, name, r->n_macros))
            return KCACHE_ENOMEM;
        v = r->n_macros++;
    }
    struct macro *m = &r->macros[v];
    for (size_t i = 0; i < m->n; i++)
        if (!strcmp(m->values[i], value))
            return 0;
    char **grown = kc_realloc(m->values, (m->n + 1) * sizeof(char *));
    if (!grown)
        return KCACHE_ENOMEM;
    m->values = grown;
    if (!(m->values[m->n] = kc_strdup(value)))
        return KCACHE_ENOMEM;
    m->n++;
    r->n_macro_values++;
    return 0;
}

static int add_func(struct resolver *r, const char *name, const char *body)
{
    if (kc_res_grow((void **)&r->func_names, &r->cap_funcs, r->n_funcs, sizeof(char *)) ||
        kc_res_grow((void **)&r->func_bodies, &r->cap_func_bodies, r->n_funcs, sizeof(char *)))
        return KCACHE_ENOMEM;
    r->func_names[r->n_funcs] = kc_strdup(name);
    r->func_bodies[r->n_funcs] = kc_strdup(body ? body : "");
    r->n_funcs++;
    return r->func_names[r->n_funcs - 1] && r->func_bodies[r->n_funcs - 1] ? 0 : KCACHE_ENOMEM;
}

static int scan_node(struct resolver *r, size_t k)
{
    struct node *nd = &r->nodes[k];
    int rc = nd->memo || nd->cmdline ? 0 : kc_scan(&nd->dirs, &nd->n_dirs, nd->text, nd->size);
    if (rc)
        return rc;
    if (!nd->memo && nd->path && r->req->read_at) {
        /* Kept for the next resolution of this process, if it can be trusted. */
        kc_memo *m = kc_memo_adopt(nd->path, &nd->id, &nd->text, nd->size, &nd->dirs,
                                   nd->n_dirs, r->req->read_at);
        if (m) {
            nd->memo = m;
            nd->text = m->text;
            nd->dirs = m->dirs;
        }
    }
    if (!(r->nodes[k].target = kc_calloc(nd->n_dirs + 1, sizeof(size_t))))
        return KCACHE_ENOMEM;
    size_t n = nd->n_dirs;
    for (size_t i = 0; !rc && i < n; i++) {
        /* r->nodes moves as files are added: index it afresh. */
        kc_directive *d = &r->nodes[k].dirs[i];
        switch (d->kind) {
        case KC_DIR_HAS_INCLUDE:
            if (d->in_macro) {
                rc = kc_res_add_macro_probe(r, d->text, d->angle, k, d->line);
                break;
            }
            /* fall through */
        case KC_DIR_INCLUDE:
            if (!d->computed) {
                size_t found;
                if ((rc = kc_res_resolve(r, d->text, d->angle, k, &found)))
                    break;
                d = &r->nodes[k].dirs[i];
                r->nodes[k].target[i] = found;
                /* A spelling that cannot be rewritten in place is handed over as is. */
                if (found && !d->exact && !r->nodes[k].toolkit)
                    rc = kc_res_add_alias(r, d->text, found - 1);
                break;
            }
            if (kc_res_grow((void **)&r->pending, &r->cap_pending, r->n_pending, sizeof(*r->pending)))
                return KCACHE_ENOMEM;
            r->pending[r->n_pending++] = (struct pending){k, i};
            break;
        case KC_DIR_INCLUDE_NEXT:
            kc_res_not_hermetic(r, "include_next", "#include_next <%s> (in %s) cannot be made hermetic",
                         d->text, kc_res_where(&r->nodes[k]));
            break;
        case KC_DIR_DEFINE:
            rc = add_macro(r, d->text, d->value ? d->value : "");
            if (!rc)
                rc = kc_res_cond_define(r, &r->nodes[k].dirs[i]);
            break;
        case KC_DIR_FUNC_DEFINE:
            rc = add_func(r, d->text, d->value);
            if (!rc)
                rc = kc_res_cond_define(r, &r->nodes[k].dirs[i]);
            break;
        case KC_DIR_CONDITION:
            rc = kc_res_cond_add(r, k, d);
            break;
        case KC_DIR_CALL:
            if (kc_res_grow((void **)&r->calls, &r->cap_calls, r->n_calls, sizeof(*r->calls)))
                return KCACHE_ENOMEM;
            r->calls[r->n_calls++] = (struct pending){k, i};
            break;
        case KC_DIR_UNCERTAIN:
            /* A digit separator lexes as C++14 does, which the scanner follows. */
            if (d->digit_sep && !r->req->before_cxx14)
                break;
            if (d->time_macro) {
                kc_res_not_hermetic(r, "time_macro",
                                    "%s:%u: %s: the kernel would hold the moment of its compile, "
                                    "which no key holds: compiled uncached",
                                    kc_res_where(&r->nodes[k]), d->line, d->text);
                break;
            }
            kc_res_not_hermetic(r, "uncertain_construct",
                         "%s:%u: %s: kcache cannot be sure what the compile reads",
                         kc_res_where(&r->nodes[k]), d->line, d->text);
            break;
        }
    }
    return rc;
}

/*
 * The -D operands as the #defines NVRTC makes of them ("NAME=VALUE" is
 * "#define NAME VALUE", "NAME(ARGS)=VALUE" a function-like one, "NAME" is
 * "#define NAME 1"), scanned as file text is, into the directives of node k:
 * a __has_include in a value is probed, a function-like value may wrap
 * __has_include, an object-like one may name a wrapper or a computed
 * include's header. Each operand is scanned alone, its line its place on
 * the command line; one over several lines is not something kcache can be
 * sure NVRTC reads as one #define.
 */
static int scan_defines(struct resolver *r, size_t k)
{
    const kc_deps_request *q = r->req;
    kc_buf text = {0};
    size_t cap = 0;
    int rc = 0;
    for (size_t i = 0; !rc && i < q->n_defines; i++) {
        const char *def = q->defines[i];
        if (strpbrk(def, "\r\n")) {
            kc_res_not_hermetic(r, "uncertain_construct",
                                "-D operand %zu spans lines: kcache cannot be sure what the "
                                "compile reads",
                                i + 1);
            continue;
        }
        const char *eq = strchr(def, '=');
        size_t nn = eq ? (size_t)(eq - def) : strlen(def);
        const char *value = eq ? eq + 1 : "1";
        text.size = 0;
        kc_directive *d = NULL;
        size_t n = 0;
        if (kc_buf_append(&text, "#define ", 8) || kc_buf_append(&text, def, nn) ||
            kc_buf_append(&text, " ", 1) || kc_buf_append(&text, value, strlen(value)) ||
            kc_buf_append(&text, "\n", 1) || kc_scan(&d, &n, (const char *)text.data, text.size)) {
            rc = KCACHE_ENOMEM;
            break;
        }
        struct node *nd = &r->nodes[k];
        if (n && kc_res_grow((void **)&nd->dirs, &cap, nd->n_dirs + n - 1, sizeof(*d))) {
            kc_directives_free(d, n);
            rc = KCACHE_ENOMEM;
            break;
        }
        for (size_t j = 0; j < n; j++) {
            d[j].line = (unsigned)(i + 1);
            d[j].exact = 0;
            nd->dirs[nd->n_dirs++] = d[j];
        }
        free(d); /* its strings now belong to the node */
    }
    kc_buf_free(&text);
    return rc;
}

/*
 * A file reached by paths in two directories (a symlink and its target):
 * kcache hands it over once, but NVRTC looks for its "quoted" includes beside
 * each path it opened it by, and may find other files. Where the file has
 * such an include (or one whose spelling kcache works out), the compile is
 * not hermetic.
 */
static void check_other_dirs(struct resolver *r)
{
    for (size_t k = 1; k < r->n_nodes && !r->out->not_hermetic; k++) {
        const struct node *nd = &r->nodes[k];
        if (!nd->other_dirs)
            continue;
        for (size_t i = 0; i < nd->n_dirs; i++) {
            const kc_directive *d = &nd->dirs[i];
            int beside = ((d->kind == KC_DIR_INCLUDE || d->kind == KC_DIR_HAS_INCLUDE) &&
                          (!d->angle || d->computed)) ||
                         d->kind == KC_DIR_CALL;
            if (beside) {
                kc_res_not_hermetic(r, "one_file_two_directories",
                                    "a header reached from two directories (a link?), where "
                                    "NVRTC looks for its includes beside each: %s",
                                    nd->path);
                break;
            }
        }
    }
}

static void resolver_free(struct resolver *r)
{
    for (size_t k = 0; k < r->n_nodes; k++) {
        struct node *nd = &r->nodes[k];
        free(nd->path);
        free(nd->dir);
        free(nd->spelling);
        free(nd->nvpath);
        if (nd->memo) {
            kc_memo_release(nd->memo);
        } else {
            if (k)
                free(nd->text);
            kc_directives_free(nd->dirs, nd->n_dirs);
        }
        free(nd->target);
        free(nd->canon);
    }
    free(r->nodes);
    kc_smap_free(&r->by_path);
    kc_smap_free(&r->by_identity);
    kc_smap_free(&r->toolkit_dirs);
    kc_strv_free(r->dir_reals, r->n_dir_reals);
    kc_strv_free(r->tk_rels, r->n_tk_rels);
    for (size_t i = 0; i < r->n_left; i++)
        kc_res_left_clear(&r->left[i]);
    free(r->left);
    kc_smap_free(&r->by_left);
    for (size_t i = 0; i < r->n_aliases; i++)
        free(r->aliases[i].name);
    free(r->aliases);
    free(r->pending);
    kc_smap_free(&r->by_memory);
    kc_smap_free(&r->by_macro);
    kc_smap_free(&r->tk_names);
    kc_smap_free(&r->tk_nodes);
    kc_smap_free(&r->vouchers);
    kc_smap_free(&r->routes);
    kc_smap_free(&r->wrappers);
    kc_res_cond_free(r);
    free(r->calls);
    for (size_t i = 0; i < r->n_mprobes; i++)
        free(r->mprobes[i].spelling);
    free(r->mprobes);
    kc_strv_free(r->func_names, r->n_funcs);
    kc_strv_free(r->func_bodies, r->n_funcs);
    for (size_t i = 0; i < r->n_macros; i++) {
        for (size_t j = 0; j < r->macros[i].n; j++)
            free(r->macros[i].values[j]);
        free(r->macros[i].values);
    }
    free(r->macros);
    for (size_t i = 0; i < r->n_looks; i++)
        kc_res_look_clear(&r->looks[i]);
    free(r->looks);
    kc_smap_free(&r->by_look);
    free(r->beside);
}

/*
 * Headers handed over in memory (nvrtcCreateProgram's) are all inputs,
 * read or not, and are scanned; their quoted includes are searched for
 * beside the header's name first, as NVRTC does. A name
 * given twice: NVRTC takes the first, and so does kcache. They keep
 * their names: the caller's includes find them by those.
 */
static int add_memory_headers(struct resolver *r)
{
    int rc;
    for (size_t i = 0; i < r->req->n_mem; i++) {
        const char *name = r->req->mem_names[i];
        size_t k;
        if (kc_smap_find(&r->by_memory, name, NULL))
            continue;
        if ((rc = kc_res_new_node(r, &k)))
            return rc < 0 ? rc : 0; /* too many files: said, not hermetic */
        struct node *nd = &r->nodes[k];
        nd->in_memory = 1;
        nd->size = strlen(r->req->mem_contents[i]);
        if (!(nd->text = kc_memdup(r->req->mem_contents[i], nd->size)) ||
            !(nd->spelling = kc_strdup(name)) || !(nd->nvpath = kc_strdup(name)) ||
            kc_smap_put(&r->by_memory, name, k))
            return KCACHE_ENOMEM;
        nd->id.state = KC_PROBE_FILE;
        kc_digest(nd->id.digest, nd->text, nd->size);
        /* NVRTC looks for an in-memory header's "quoted" includes beside its
         * name, relative to the working directory. */
        if (!(nd->dir = kc_path_dirname(name)))
            return KCACHE_ENOMEM;
    }
    return 0;
}

int kc_deps_resolve(kc_deps *out, const kc_deps_request *req, char *msg, size_t msg_size)
{
    struct resolver r = {.req = req, .out = out, .msg = msg, .msg_size = msg_size};
    memset(out, 0, sizeof(*out));
    if (msg && msg_size)
        msg[0] = '\0';
    size_t src;
    int rc = kc_res_new_node(&r, &src);
    if (!rc) {
        r.nodes[src].text = (char *)req->source; /* borrowed: never freed (k == 0) */
        r.nodes[src].size = req->source_size;
        /* The program's path, as its beside lookups spell what they open (lookup.c). */
        const char *name = req->source_name ? req->source_name : "";
        const char *dir = req->source_dir && strcmp(req->source_dir, ".") ? req->source_dir : NULL;
        size_t n = strlen(name) + (dir ? strlen(dir) + 1 : 0) + 1;
        if (!(r.nodes[src].nvpath = kc_malloc(n)))
            rc = KCACHE_ENOMEM;
        else if (strchr(name, '/') || !dir)
            snprintf(r.nodes[src].nvpath, n, "%s", name);
        else
            snprintf(r.nodes[src].nvpath, n, "%s/%s", dir, name);
        if (!req->no_source_include && req->source_dir &&
            !(r.nodes[src].dir = kc_strdup(req->source_dir)))
            rc = KCACHE_ENOMEM;
    }
    if (!rc)
        rc = add_memory_headers(&r);
    if (!rc && req->n_defines) {
        size_t k;
        if (!(rc = kc_res_new_node(&r, &k))) {
            r.nodes[k].cmdline = 1;
            rc = scan_defines(&r, k);
        } else {
            rc = rc < 0 ? rc : 0;
        }
    }
    for (size_t i = 0; !rc && i < req->n_pre_includes; i++) {
        /* -include headers are read first: the caller's in-memory headers, then the
         * working directory, then each -I directory. */
        size_t found;
        r.pre_include = 1;
        rc = kc_res_resolve(&r, req->pre_includes[i], 0, src, &found);
        r.pre_include = 0;
        if (!rc && found)
            rc = kc_res_add_alias(&r, req->pre_includes[i], found - 1);
    }
    size_t done_pending = 0;
    while (!rc) {
        while (!rc && r.next_scan < r.n_nodes)
            rc = scan_node(&r, r.next_scan++);
        size_t progress = 0;
        if (!rc)
            rc = kc_res_resolve_calls(&r, &progress);
        if (!rc)
            rc = kc_res_resolve_macro_probes(&r, &progress);
        if (!rc && done_pending == r.n_pending && !progress && r.next_scan == r.n_nodes) {
            /* Conditions last, once every definition in reach has been seen. */
            rc = kc_res_cond_expand(&r, &progress);
            if (!rc && progress)
                continue;
        }
        if (rc || (done_pending == r.n_pending && !progress && r.next_scan == r.n_nodes))
            break;
        /* Computed includes, once every #define in reach has been seen. */
        size_t upto = r.n_pending;
        for (; !rc && done_pending < upto; done_pending++) {
            struct pending p = r.pending[done_pending];
            rc = kc_res_resolve_pending(&r, &p);
        }
    }
    if (!rc && !req->no_source_include)
        check_other_dirs(&r);
    if (!rc && !out->not_hermetic)
        rc = kc_res_hermetic_handed(&r);
    if (!rc && !out->not_hermetic) {
        kc_res_nvpath_spread(&r);
        rc = kc_res_assign_names(&r);
    }
    if (!rc && !out->not_hermetic)
        rc = kc_res_emit(&r);
    resolver_free(&r);
    if (rc) {
        if (rc == KCACHE_ENOMEM && msg && msg_size)
            snprintf(msg, msg_size, "out of memory resolving includes");
        kc_deps_free(out);
        return rc;
    }
    return 0;
}

void kc_deps_free(kc_deps *deps)
{
    for (size_t i = 0; i < deps->n_deps; i++) {
        free(deps->deps[i].name);
        free(deps->deps[i].content);
        free(deps->deps[i].toolkit_rel);
        free(deps->deps[i].path);
        free(deps->deps[i].nvpath);
    }
    free(deps->deps);
    free(deps->source);
    for (size_t i = 0; i < deps->n_probes; i++)
        free(deps->probes[i].path);
    free(deps->probes);
    kc_strv_free(deps->handed, deps->n_handed);
    kc_strv_free(deps->tk_read, deps->n_tk_read);
    memset(deps, 0, sizeof(*deps));
}

/*
 * Canonical names and the texts handed to NVRTC (see deps.c for why every
 * file gets one name and its includes are rewritten to it), and the
 * dependencies a resolution emits for the key.
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

static int name_taken(struct resolver *r, const kc_smap *canon, const char *name, size_t k)
{
    size_t v;
    if (kc_smap_find(canon, name, &v))
        return v != k;
    if (kc_smap_find(&r->by_left, name, NULL) || kc_smap_find(&r->tk_names, name, NULL))
        return 1;
    for (size_t i = 0; i < r->n_aliases; i++)
        if (!strcmp(r->aliases[i].name, name))
            return r->aliases[i].node != k;
    return r->req->source_name && !strcmp(r->req->source_name, name);
}

int kc_res_assign_names(struct resolver *r)
{
    kc_smap canon = {0};
    int rc = 0;
    for (size_t k = 1; !rc && k < r->n_nodes; k++) {
        struct node *nd = &r->nodes[k];
        if (nd->toolkit || nd->cmdline)
            continue;
        if (nd->in_memory) {
            /* Created first, with distinct names: nothing can have taken one yet. */
            if (!(nd->canon = kc_strdup(nd->spelling)) || kc_smap_put(&canon, nd->canon, k))
                rc = KCACHE_ENOMEM;
            continue;
        }
        const char *base = "";
        if (nd->beside && nd->parent != 0)
            base = r->nodes[nd->parent].canon;
        size_t n = strlen(base) + strlen(nd->spelling) + 2;
        char *pref = kc_malloc(n);
        if (!pref) {
            rc = KCACHE_ENOMEM;
            break;
        }
        const char *slash = strrchr(base, '/');
        if (slash && nd->spelling[0] != '/')
            snprintf(pref, n, "%.*s/%s", (int)(slash - base), base, nd->spelling);
        else
            snprintf(pref, n, "%s", nd->spelling);
        char *name = kc_path_normalized(pref);
        free(pref);
        if (!(pref = name)) {
            rc = KCACHE_ENOMEM;
            break;
        }
        for (unsigned i = 2; !rc && (!*name || name_taken(r, &canon, name, k)); i++) {
            /* Taken: a prefix no spelling has, without ".." for NVRTC to fold away. */
            size_t m = strlen(pref) * 3 + 32;
            char *alt = kc_malloc(m);
            if (!alt) {
                rc = KCACHE_ENOMEM;
                break;
            }
            int w = snprintf(alt, m, "@%u/", i);
            for (const char *s = pref; *s; s++) {
                if (s[0] == '.' && s[1] == '.' && (s == pref || s[-1] == '/') &&
                    (s[2] == '/' || !s[2])) {
                    memcpy(alt + w, "up", 2);
                    w += 2;
                    s++;
                } else {
                    alt[w++] = *s == '/' && s == pref ? '_' : *s;
                }
            }
            alt[w] = '\0';
            if (name != pref)
                free(name);
            name = alt;
        }
        if (name != pref)
            free(pref);
        nd->canon = name;
        if (!rc && kc_smap_put(&canon, name, k))
            rc = KCACHE_ENOMEM;
    }
    kc_smap_free(&canon);
    return rc;
}

/*
 * Whether path can stand in a #line directive as it is: the hermetic compile
 * hands each user header over with a first line #line 1 "PATH", so that NVRTC
 * says the path it would have opened for the header's __FILE__ and in its
 * diagnostics; a string literal there would read '"' and '\\' as escapes,
 * and "??/" as one where trigraphs are on.
 */
int kc_res_line_spellable(const char *path)
{
    for (const unsigned char *p = (const unsigned char *)path; *p; p++)
        if (*p == '"' || *p == '\\' || *p < 0x20 || *p == 0x7f || (p[0] == '?' && p[1] == '?'))
            return 0; /* "??/" is a backslash where trigraphs are on (-std=c++03, c++11) */
    return 1;
}

/* The node's text with every literal include of a user file spelled by its canonical name. */
static int rewrite(struct resolver *r, size_t k, char **out, size_t *out_size)
{
    const struct node *nd = &r->nodes[k];
    kc_buf b = {0};
    size_t at = 0;
    *out = NULL;
    for (size_t i = 0; i < nd->n_dirs; i++) {
        const kc_directive *d = &nd->dirs[i];
        if (!nd->target[i] || !d->exact)
            continue;
        const char *canon = r->nodes[nd->target[i] - 1].canon;
        size_t len = strlen(d->text);
        if (!strcmp(canon, d->text))
            continue;
        if (kc_buf_append(&b, nd->text + at, d->at - at) ||
            kc_buf_append(&b, canon, strlen(canon)))
            goto nomem;
        at = d->at + len;
    }
    if (!b.size && at == 0)
        return 0;
    if (kc_buf_append(&b, nd->text + at, nd->size - at) || kc_buf_append(&b, "", 1))
        goto nomem;
    *out = (char *)b.data;
    *out_size = b.size - 1;
    return 0;
nomem:
    kc_buf_free(&b);
    return KCACHE_ENOMEM;
}

static int push_dep(kc_deps *o, size_t *cap, kc_dep **out)
{
    if (kc_res_grow((void **)&o->deps, cap, o->n_deps, sizeof(*o->deps)))
        return KCACHE_ENOMEM;
    *out = &o->deps[o->n_deps++];
    memset(*out, 0, sizeof(**out));
    return 0;
}

static int cmp_dep(const void *a, const void *b)
{
    return strcmp(((const kc_dep *)a)->name, ((const kc_dep *)b)->name);
}

int kc_res_emit(struct resolver *r)
{
    kc_deps *o = r->out;
    size_t cap = 0;
    kc_dep *d;
    int rc = rewrite(r, 0, &o->source, &o->source_size);
    for (size_t k = 1; !rc && k < r->n_nodes; k++) {
        struct node *nd = &r->nodes[k];
        char *text = NULL;
        size_t size = 0;
        if (nd->toolkit && nd->path)
            rc = kc_strv_push(&o->tk_read, &o->n_tk_read, nd->path);
        if (rc || nd->toolkit || nd->cmdline)
            continue;
        if ((rc = rewrite(r, k, &text, &size)) || (rc = push_dep(o, &cap, &d))) {
            free(text);
            break;
        }
        d->state = KC_DEP_USER;
        if (text) {
            kc_digest(d->digest, text, size);
        } else { /* handed over as read: the digest it was read with */
            if (nd->memo) {
                if (!(text = kc_memdup(nd->text, nd->size))) {
                    rc = KCACHE_ENOMEM;
                    break;
                }
            } else { /* the node gives its text up */
                text = nd->text;
                nd->text = NULL;
            }
            size = nd->size;
            memcpy(d->digest, nd->id.digest, KC_DIGEST_SIZE);
        }
        assert(nd->id.state == KC_PROBE_FILE); /* every text here was read with its digest */
        d->content = text;
        d->size = size;
        if (!(d->name = kc_strdup(nd->canon)) ||
            !(d->path = kc_strdup(nd->path ? nd->path : "(in memory)")) ||
            (!nd->in_memory && nd->nvpath && !(d->nvpath = kc_strdup(nd->nvpath))))
            rc = KCACHE_ENOMEM;
        d->nv_ambiguous = !nd->in_memory && (nd->nv_ambiguous || !nd->nvpath);
        d->nv_from_name = !nd->in_memory && nd->nv_from_name;
        if (!rc && d->nvpath && !kc_res_line_spellable(d->nvpath))
            kc_res_not_hermetic(r, "header_path_unspellable",
                                "%s: a path with a quote, a backslash or a control character "
                                "cannot be given to NVRTC as the header's name",
                                d->nvpath);
    }
    for (size_t i = 0; !rc && i < r->n_aliases; i++) {
        const struct node *nd = &r->nodes[r->aliases[i].node];
        if (!strcmp(nd->canon, r->aliases[i].name))
            continue;
        if ((rc = push_dep(o, &cap, &d)))
            break;
        size_t n = strlen(nd->canon) + 16;
        d->state = KC_DEP_USER;
        if (!(d->content = kc_malloc(n)) || !(d->name = kc_strdup(r->aliases[i].name)) ||
            !(d->path = kc_strdup(nd->path ? nd->path : "(in memory)"))) {
            rc = KCACHE_ENOMEM;
            break;
        }
        d->size = (size_t)snprintf(d->content, n, "#include \"%s\"\n", nd->canon);
        kc_digest(d->digest, d->content, d->size);
    }
    for (size_t i = 0; !rc && i < r->n_left; i++) {
        struct leftname *l = &r->left[i];
        if ((rc = push_dep(o, &cap, &d)))
            break;
        d->state = l->state;
        d->name = l->name;
        d->toolkit_rel = l->rel;
        d->path = l->path;
        l->name = l->rel = l->path = NULL;
    }
    if (rc)
        return rc;
    if (o->n_deps)
        qsort(o->deps, o->n_deps, sizeof(*o->deps), cmp_dep);
    for (size_t i = 1; i < o->n_deps; i++)
        if (!strcmp(o->deps[i].name, o->deps[i - 1].name))
            kc_res_not_hermetic(r, "ambiguous_name", "'%s' would name two headers", o->deps[i].name);
    for (size_t i = 0; i < r->n_aliases; i++)
        if (kc_smap_find(&r->tk_names, r->aliases[i].name, NULL))
            kc_res_not_hermetic(r, "ambiguous_name",
                         "'%s' names a user header from one place and a toolkit header or "
                         "nothing from a toolkit header",
                         r->aliases[i].name);
    return 0;
}
